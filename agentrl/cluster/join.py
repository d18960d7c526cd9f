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

``ray.init`` has no deadline for reaching the head: at an address nothing answers it retries for
~14 minutes. So the address is checked first, in seconds (``check_address``): ``HOST:PORT`` (the
head's GCS port) and ``ray://HOST[:PORT]`` (Ray Client; port 10001 by default) by a TCP connection,
``auto`` by the address Ray would pick (``RAY_ADDRESS``, else the cluster the last ``ray start`` on
this machine started or joined) and then the same connection; ``local`` is Ray's own (a new local
cluster) and not checked. Anything else is refused by name. Every failure to join is a
``StartupError`` naming ``resources.ray_address``.
"""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path

import ray

from agentrl.config.errors import StartupError

AUTH_MODE = "RAY_AUTH_MODE"
DEFAULT_TOKEN = "~/.ray/auth_token"
KEY = "resources.ray_address"
GCS_PORT = 6379  # `ray start --head`'s default, for the hints
CLIENT_PORT = 10001  # the Ray Client server's default port, for ray://HOST
CLIENT = "ray://"
CONNECT_TIMEOUT_S = 2.0  # one TCP connection attempt; a head on a working network answers in ms
CONNECT_ATTEMPTS = 3  # a head that is just starting gets a couple more tries
RETRY_PAUSE_S = 1.0
# HOST:PORT, the host a name, an IPv4 address or a bracketed IPv6 address
_HOST_PORT = re.compile(r"(?:\[(?P<v6>[\w:.%]+)\]|(?P<host>[\w.-]+)):(?P<port>\d{1,5})")


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


def parse_address(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``HOST:PORT`` (an IPv6 host in brackets), or None when it is not one."""
    match = _HOST_PORT.fullmatch(address.strip())
    if match is None or not 0 < int(match["port"]) < 65536:
        return None
    return match["v6"] or match["host"], int(match["port"])


def _malformed(address: str) -> StartupError:
    return StartupError(
        f"{KEY}={address!r} is not an address Ray can join: expected HOST:PORT, the head's GCS address "
        f"(port {GCS_PORT} unless `ray start --head --port` chose another; e.g. 10.0.0.5:{GCS_PORT}), "
        f"{CLIENT}HOST[:PORT] (Ray Client, port {CLIENT_PORT} by default), auto (the cluster this "
        "machine's `ray start` started or joined), or null to start a local cluster"
    )


def _auto_address() -> tuple[str, str] | None:
    """The address ``ray.init(address="auto")`` would join, and where it was found; None when this
    Ray cannot say (its private helpers moved), so that Ray's own search decides."""
    try:
        from ray._private.services import canonicalize_bootstrap_address
        from ray._private.utils import get_ray_address_file, read_ray_address
    except ImportError:
        return None
    variable, recorded = os.environ.get("RAY_ADDRESS"), get_ray_address_file(None)
    try:
        found = canonicalize_bootstrap_address("auto")
    except ValueError:  # Ray's "Invalid address format"
        raise StartupError(f"{KEY}=auto reads RAY_ADDRESS={variable!r}, which is not HOST:PORT") from None
    except ConnectionError:  # Ray's "Could not find any running Ray instance"
        raise StartupError(
            f"{KEY}=auto found no running Ray cluster on this machine: RAY_ADDRESS is unset, no "
            f"`ray start` here recorded one ({recorded}: no such file), and no GCS process runs here. "
            f"Start the head (`ray start --head --port={GCS_PORT}`) or join it from this node "
            f"(`ray start --address=HEAD_IP:{GCS_PORT}`), or set {KEY}=HEAD_IP:{GCS_PORT}"
        ) from None
    if not found:
        return None
    # Ray's order: the variable, then the file `ray start` writes, then any GCS process running here
    if variable:
        return found, "RAY_ADDRESS"
    return found, recorded if read_ray_address(None) else "a GCS process running here"


def _probe(host: str, port: int) -> tuple[str, str] | None:
    """None when a TCP connection to ``host:port`` opens, else what happened: ``(kind, text)``,
    kind one of unresolved, refused, timeout, failed."""
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return None
    except socket.gaierror as error:
        return "unresolved", f"the host name {host!r} was not resolved ({error.strerror})"
    except ConnectionRefusedError:
        return "refused", f"the connection was refused: nothing listens on port {port} there"
    except TimeoutError:
        why = "the host is down, or a firewall drops the packets"
        return "timeout", f"no answer within {CONNECT_TIMEOUT_S:g} s ({why})"
    except OSError as error:  # no route to host, network unreachable
        return "failed", f"the connection failed ({error.strerror or error})"


def _target(address: str) -> tuple[str, int, bool, str] | None:
    """The host and TCP port to try for ``address``, whether it is a Ray Client address, and
    where ``auto`` found it ("" otherwise); None for an ``auto`` this Ray cannot resolve here (its
    own search decides); a ``StartupError`` when it is no address."""
    text, found = address.strip(), ""
    if text == "auto":
        auto = _auto_address()
        if auto is None:
            return None
        text, where = auto
        found = f" (found {text} in {where})"
    client = text.startswith(CLIENT)
    target = text[len(CLIENT) :] if client else text
    if client and parse_address(target) is None and parse_address(f"{target}:{CLIENT_PORT}"):
        target = f"{target}:{CLIENT_PORT}"
    parsed = parse_address(target)
    if parsed is None:
        raise _malformed(address)
    return parsed[0], parsed[1], client, found


def _advice(host: str, port: int, client: bool, kind: str) -> str:
    if kind == "unresolved":
        return "Check the host name, or give the head's IP address"
    if client:
        started = (
            f"Check that the head is started and serves Ray Client on port {port} (`ray start --head` "
            f"does, on port {CLIENT_PORT} unless --ray-client-server-port says otherwise)"
        )
    else:
        started = (
            f"Check that the head is started (`ray start --head --port={port}` on {host}) and that this "
            "is the GCS address `ray start --head` printed"
        )
    return f"{started}, and that no firewall between this machine and the head blocks the port"


def check_address(address: str | None) -> None:
    """Raise a ``StartupError``, within ~10 s, unless something answers at the Ray address
    ``address`` (``resources.ray_address``) names: its form is checked, then a TCP connection to
    the head's port is tried up to ``CONNECT_ATTEMPTS`` times. Nothing to check for None (a
    local cluster) or ``local``."""
    if not address or address.strip() == "local":
        return
    target = _target(address)
    if target is None:
        return
    host, port, client, found = target
    started = time.monotonic()
    for attempt in range(1, CONNECT_ATTEMPTS + 1):
        problem = _probe(host, port)
        if problem is None:
            return
        if problem[0] == "unresolved" or attempt == CONNECT_ATTEMPTS:  # a misspelt name stays one
            break
        time.sleep(RETRY_PAUSE_S)
    kind, text = problem
    tries = f"{attempt} attempt(s) in {time.monotonic() - started:.1f} s"
    raise StartupError(
        f"cannot reach the Ray cluster at {KEY}={address}{found}: {text} ({tries}). "
        f"{_advice(host, port, client, kind)}"
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
    check_address(address)
    turned_on = _token_mode_if_token()
    try:
        ray.init(address=address)
    except Exception as error:  # ConnectionError, RuntimeError, AuthenticationError: Ray's choice
        if _is_auth_error(error):
            raise StartupError(_auth_message(address, turned_on)) from error
        raise StartupError(f"could not join the Ray cluster at {KEY}={address}: {error}") from error
