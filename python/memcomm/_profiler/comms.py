"""The trace's communicator index of each process group the script's collectives run on (with its
CommInfo record), and each one's next sequence number."""
import itertools
import threading
import zlib
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

import torch.distributed as dist

from memcomm import _memcomm


def _group_hash(group: Any, ranks: List[int]) -> int:
    """What names a process group alike on every rank of it (the CommInfo hash that matches its
    collectives across ranks): its ranks, and its name, which c10d gives in creation order, the same
    on every rank; the ranks alone made the world and a second group over the same ranks (a Gloo
    side group for CPU collectives) one communicator, their sequence numbers mixed."""
    key = (getattr(group, "group_name", ""), sorted(ranks))
    return zlib.crc32(repr(key).encode()) | (1 << 32)


class Communicators:
    """Indices from 0 in the order groups are first seen (None, the default group, first). The
    default group is one communicator whether a collective names it or not (DDP's process_group is
    the world group's object; a hook's state is None). A communicator first seen before
    init_process_group (a profile started first) gets its CommInfo at its first collective after, and
    `on_world(size)` hears the default group's size then (the launcher may have set the world up
    after the profile started: Lightning's own launcher)."""

    def __init__(self, on_world: Callable[[int], None] = lambda size: None) -> None:
        self._on_world = on_world
        self._index: Dict[Optional[int], int] = {}
        self._seq: Dict[int, Iterator[int]] = {}
        self._described: Set[int] = set()
        self._lock = threading.Lock()

    def clear(self) -> None:
        self._index.clear()
        self._seq.clear()
        self._described.clear()

    def index(self, group: Any) -> int:
        """The trace's communicator index of `group` (None: the default group), with its CommInfo."""
        if group is not None and group is dist.group.WORLD:
            group = None
        key = id(group) if group is not None else None
        index = self._index.get(key)
        if index is None:
            with self._lock:
                if key not in self._index:
                    self._index[key] = self._new()
                index = self._index[key]
        if index not in self._described:
            self._describe(index, group)
        return index

    def _new(self) -> int:
        index = len(self._index)
        if index > 254:
            raise RuntimeError("memcomm records at most 255 process groups")
        self._seq[index] = itertools.count()
        return index

    def _describe(self, index: int, group: Any) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            return
        with self._lock:
            if index in self._described:
                return
            pg = group if group is not None else dist.group.WORLD
            try:
                ranks = dist.get_process_group_ranks(pg)
            except KeyError:  # inside init_process_group, before it files the group's ranks (a spawned
                return        # child's profile starts there: Note [Profiles of spawned processes])
            size, rank = len(ranks), dist.get_rank(group) if group is not None else dist.get_rank()
            _memcomm.comm_info(index, size, rank, _group_hash(pg, ranks))
            self._described.add(index)
        if group is None:
            self._on_world(size)

    def next_collective(self, group: Any) -> Tuple[int, int]:
        """(communicator index, sequence number) for a collective about to be issued on `group`."""
        index = self.index(group)
        return index, next(self._seq[index])
