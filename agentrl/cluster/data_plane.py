"""The network interface and the rendezvous of a role's process group.

A role's ranks meet at rank 0's node address (``group._rendezvous``) through torch's TCPStore,
then gloo (CPU) or NCCL (GPU) open their own connections between the ranks. Without
``GLOO_SOCKET_IFNAME`` gloo binds whatever the hostname resolves to, which on Debian-like hosts is
``127.0.1.1``: ranks on other hosts then cannot reach it. So every rank names its interface:
``resources.socket_ifname`` when configured, else what the environment already sets, else the
interface that holds the node's own (Ray) address. A group whose ranks cannot meet fails within
``resources.rendezvous_timeout_s`` with an error that says who could not reach whom, instead of
torch's 30-minute default.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
from datetime import timedelta

import psutil
import torch.distributed as dist
from torch.distributed.constants import default_pg_nccl_timeout, default_pg_timeout

logger = logging.getLogger(__name__)

IFNAME_VARIABLES: tuple[str, ...] = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
_FAMILIES = (socket.AF_INET, socket.AF_INET6)


def _addresses() -> list[tuple[str, str, str | None]]:
    """(interface, address, netmask) of every IPv4/IPv6 address this host holds."""
    found = []
    for name, addresses in psutil.net_if_addrs().items():
        for snic in addresses:
            if snic.family in _FAMILIES:
                # a link-local IPv6 address carries its zone ("fe80::1%eth0"); ipaddress wants it bare
                found.append((name, snic.address.split("%")[0], snic.netmask))
    return found


def interface_for(address: str) -> str | None:
    """The local interface whose address is ``address``, else the one whose network
    (address/netmask) contains it (``127.0.0.2``: loopback's, as ``127.0.0.0/8`` is); None when
    no interface of this host is on that address's network."""
    try:
        wanted = ipaddress.ip_address(address)
    except ValueError:  # a host name: where it resolves
        try:
            wanted = ipaddress.ip_address(socket.gethostbyname(address))
        except OSError:
            return None
    held = _addresses()
    for name, held_address, _ in held:
        if ipaddress.ip_address(held_address) == wanted:
            return name
    for name, held_address, netmask in held:
        if netmask is None:
            continue
        try:
            network = ipaddress.ip_network(f"{held_address}/{netmask}", strict=False)
        except ValueError:  # a netmask psutil reports in a form ipaddress does not read
            continue
        if wanted in network:
            return name
    return None


def interface_env(node_address: str, configured: str | None) -> dict[str, str]:
    """The values of ``GLOO_SOCKET_IFNAME`` and ``NCCL_SOCKET_IFNAME`` to set in this process.

    ``configured`` (``resources.socket_ifname``: one interface name, or several separated by
    commas) wins and must exist on this host; else a variable the environment already sets is
    left alone (it is not returned; the other one, when unset, is still derived); else the
    interface that holds ``node_address``. Empty when nothing is configured and no interface
    holds that address (gloo then binds the address the hostname resolves to)."""
    if configured is not None:
        interfaces = sorted(psutil.net_if_addrs())
        names = [name.strip() for name in configured.split(",")]
        missing = [name for name in names if name not in interfaces]
        if missing:
            raise ValueError(
                f"resources.socket_ifname={configured!r}: no interface {missing[0]!r} on this host "
                f"({socket.gethostname()}, node address {node_address}); it has {', '.join(interfaces)}. "
                "Name one of these (the same name must exist on every node), or set it to null to use "
                "the interface that holds each node's address"
            )
        return {variable: ",".join(names) for variable in IFNAME_VARIABLES}
    unset = [variable for variable in IFNAME_VARIABLES if not os.environ.get(variable)]
    if not unset:
        return {}
    derived = interface_for(node_address)
    if derived is None:
        logger.warning(
            "no interface of %s holds the node address %s: %s left unset, so the data plane binds "
            "the address the hostname resolves to; set resources.socket_ifname if ranks cannot meet",
            socket.gethostname(),
            node_address,
            " and ".join(unset),
        )
        return {}
    return {variable: derived for variable in unset}


def _interface_in_use(backend: str) -> str:
    """The interface variable this backend reads, as the process now has it, for error messages."""
    variable = "NCCL_SOCKET_IFNAME" if backend == "nccl" else "GLOO_SOCKET_IFNAME"
    value = os.environ.get(variable)
    if value:
        return f"{variable}={value}"
    return f"{variable} unset: the address {socket.gethostname()} resolves to"


def _first_line(error: BaseException) -> str:
    """torch's error text without the C++ stack it appends."""
    text = str(error).split("Exception raised from")[0].strip()
    return text.splitlines()[0].rstrip(".") if text else type(error).__name__


def join_group(
    backend: str,
    rank: int,
    world_size: int,
    master_addr: str,
    master_port: int,
    node_address: str,
    timeout_s: float,
    configured_ifname: str | None,
) -> None:
    """Create the default process group through the chosen interface, waiting at most
    ``timeout_s`` for the ranks to meet.

    The rendezvous deadline bounds the TCPStore connection (a client retries until then) and
    gloo's connections between the ranks; once the group stands, its collectives get torch's
    default deadline back, so a long step is not cut at the rendezvous timeout (a stage's own
    deadline is ``resources.call_timeout_s``). NCCL connects lazily, at the first collective:
    only its rendezvous is bounded here."""
    os.environ.update(interface_env(node_address, configured_ifname))
    os.environ["MASTER_ADDR"] = master_addr
    os.environ["MASTER_PORT"] = str(master_port)
    try:
        dist.init_process_group(
            backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_s)
        )
    except RuntimeError as error:  # torch's DistError family (DistNetworkError, DistStoreError) included
        raise RuntimeError(
            f"rank {rank} of {world_size} on node {node_address} could not meet its group at "
            f"{master_addr}:{master_port} within resources.rendezvous_timeout_s={timeout_s:g} s "
            f"({backend}, {_interface_in_use(backend)}): {_first_line(error)}. Check that every node can "
            f"open TCP connections to {master_addr}:{master_port} and to the other ranks' nodes (a "
            "firewall between nodes), that resources.socket_ifname (or GLOO_SOCKET_IFNAME / "
            "NCCL_SOCKET_IFNAME) names the interface on the network the nodes share, and that all "
            f"{world_size} ranks started (a slow start needs a longer resources.rendezvous_timeout_s)"
        ) from error
    # torch's own defaults (NCCL 10 min, others 30 min); NCCL's is None in a build without NCCL.
    # Both setters are private torch API: where a torch lacks one, the rendezvous deadline stays.
    default = (backend == "nccl" and default_pg_nccl_timeout) or default_pg_timeout
    c10d = dist.distributed_c10d
    if hasattr(c10d, "_set_pg_timeout"):
        c10d._set_pg_timeout(default)
    # the store keeps the deadline it was made with; NCCL swaps its connection ids through it at the
    # first collective, which a rank still loading a large model may reach minutes after its peers
    store = c10d._get_default_store() if hasattr(c10d, "_get_default_store") else None
    if store is not None and hasattr(store, "set_timeout"):
        store.set_timeout(default)
