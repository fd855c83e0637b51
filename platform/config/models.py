"""The model zoo, as the platform sees it: re-exported from :mod:`algorithms.models`.

Models are pure PyTorch and algorithms build some themselves (FedED's autoencoders), so the zoo lives under
``algorithms/`` (which never imports ``platform``); the platform builds clients' and servers' models from it.
"""
from itertools import groupby
from typing import Optional

from algorithms.models import *  # noqa: F401,F403
from algorithms.models import __all__  # noqa: F401
from algorithms.models import architecture_shares, assign_architectures
from platform.errors import ConfigError

ARCHITECTURES_FIELD = "model.architectures"


def check_whole_blocks(spec, num_clients: int, field: str = ARCHITECTURES_FIELD) -> None:
    """With ``model.assignment: blocks``, refuse architecture shares that do not split ``num_clients`` into whole
    blocks (e.g. 3 equal shares of 20 clients): :func:`assign_architectures` would round them by largest remainder
    (6/7/7) without saying so. Explicit shares that multiply out to whole client counts (``[{name: a, share: 6},
    {name: b, share: 7}, {name: c, share: 7}]`` for 20) are accepted. Raises :class:`ConfigError` on ``field``
    naming the counts the blocks would get."""
    entries = architecture_shares(spec, field)
    total = sum(share for _, share in entries)
    exact = [share / total * num_clients for _, share in entries]
    if all(abs(e - round(e)) <= 1e-9 for e in exact):
        return
    blocks = [(name, len(list(run))) for name, run in groupby(assign_architectures(spec, num_clients, None, field))]
    wanted = ", ".join(f"{name} {e:.4g}" for (name, _), e in zip(entries, exact))
    rounded = ", ".join(f"{name} {count}" for name, count in blocks)
    shares = ", ".join(f"{{name: {name}, share: {count}}}" for name, count in blocks)
    raise ConfigError(field, f"the shares do not divide clients.num_clients={num_clients} into whole contiguous "
                             f"blocks (model.assignment blocks): {wanted} clients would be rounded to {rounded}; "
                             f"give shares that multiply out to whole client counts, e.g. [{shares}], or change "
                             f"clients.num_clients")


def client_architectures(config) -> Optional[list[str]]:
    """Each client's architecture (``model.architectures``), or None when every client runs ``model.name``."""
    if config.model.architectures is None:
        return None
    return assign_architectures(config.model.architectures, config.clients.num_clients,
                                None if config.model.assignment == "blocks" else config.stream_seed("partition"))
