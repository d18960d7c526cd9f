"""Joining (or starting) the Ray cluster a run uses.

``resources.ray_address`` null starts a local cluster with the CPUs the roles need. An
address joins the cluster there. Ray 2.60 turns token authentication on by default: ``ray
start --head`` enables it when a token exists (``~/.ray/auth_token``, which any earlier local
``ray.init()`` writes) or with ``RAY_AUTH_MODE=token``. A driver joining such a head, though,
sends its token only in token mode, which ``ray.init(address=...)`` does not turn on by itself
even when the token is right there: the join fails after ~20 s with ``InvalidAuthToken``. So
when ``RAY_AUTH_MODE`` is unset and a token is where Ray reads it, the driver turns token mode
on, as ``ray start`` does; a refused token becomes an error that says where it was looked for.
A head started with ``RAY_AUTH_MODE=disabled`` accepts a token-mode driver too.
"""

from __future__ import annotations

import os
from pathlib import Path

import ray

AUTH_MODE = "RAY_AUTH_MODE"
DEFAULT_TOKEN = "~/.ray/auth_token"


def _file(path: Path) -> str:
    return f"{path}: {'a file' if path.is_file() else 'no such file'}"


def token_places() -> list[tuple[str, bool]]:
    """Where Ray reads its token from, in Ray's order, each with whether it holds one here."""
    variable = bool(os.environ.get("RAY_AUTH_TOKEN"))
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    named = Path(path).expanduser() if path else None
    default = Path(DEFAULT_TOKEN).expanduser()
    return [
        (f"RAY_AUTH_TOKEN ({'set' if variable else 'unset'})", variable),
        (f"RAY_AUTH_TOKEN_PATH ({_file(named) if named else 'unset'})", bool(named and named.is_file())),
        (f"{DEFAULT_TOKEN} ({_file(default)})", default.is_file()),
    ]


def _token_mode_if_token() -> bool:
    """Turn Ray's token mode on when ``RAY_AUTH_MODE`` is unset and a token is available; whether it did."""
    if AUTH_MODE in os.environ or not any(found for _, found in token_places()):
        return False  # the user's explicit choice stands; without a token, token mode cannot help
    # This changes only this driver process (and the processes it starts itself): the cluster's
    # raylets and the workers they start keep the mode their `ray start` gave them.
    os.environ[AUTH_MODE] = "token"
    try:
        from ray._raylet import Config
    except ImportError:  # a Ray without token authentication: nothing cached to refresh
        return True
    # Ray caches its config when it is imported; `ray start` refreshes it the same way after
    # setting the variable (ray._private.authentication.authentication_token_setup), or the
    # driver still connects in the mode it read at import.
    Config.initialize("")
    return True


def _is_auth_error(error: BaseException | None) -> bool:
    """Whether ``error`` or what caused it is Ray refusing the token (Ray wraps it in a
    ConnectionError whose cause's text holds the AuthenticationError)."""
    seen: set[int] = set()
    auth = getattr(ray.exceptions, "AuthenticationError", ())
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        text = str(error)
        if isinstance(error, auth) or "InvalidAuthToken" in text or "AuthenticationError" in text:
            return True
        error = error.__cause__ or error.__context__
    return False


def _auth_message(address: str, turned_on: bool) -> str:
    mode = os.environ.get(AUTH_MODE)
    if turned_on:
        how = "token mode on, turned on here because a token was found"
    elif mode is not None:
        how = f"{AUTH_MODE}={mode} in this environment"
    else:
        how = "no token found, so no token was sent"
    places = "; ".join(place for place, _ in token_places())
    return (
        f"could not join the Ray cluster at resources.ray_address={address}: it refused this driver's "
        f"authentication ({how}). Ray looks for the token in, in this order: {places}. Copy the head's "
        f"{DEFAULT_TOKEN} to this machine's {DEFAULT_TOKEN} (or point RAY_AUTH_TOKEN_PATH at a copy, or put "
        "it in RAY_AUTH_TOKEN), the same token every node was started with; or, on a private network "
        "only, start every node with RAY_AUTH_MODE=disabled (docs/scaling.md)"
    )


def join_cluster(address: str | None, num_cpus: int) -> None:
    """Connect this driver to the Ray cluster at ``address``, or start a local one with
    ``num_cpus`` CPUs when it is None; nothing when Ray is already initialised (a caller's own
    ``ray.init``)."""
    if ray.is_initialized():
        return
    if not address:
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=True)
        return
    turned_on = _token_mode_if_token()
    try:
        ray.init(address=address)
    except Exception as error:  # ConnectionError, RuntimeError, AuthenticationError: Ray's choice
        if _is_auth_error(error):
            raise RuntimeError(_auth_message(address, turned_on)) from error
        raise
