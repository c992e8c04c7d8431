"""The trace's communicator index of each process group the script's collectives run on (with its
CommInfo record), and each one's next sequence number."""
import itertools
import threading
import zlib
from typing import Any, Dict, Iterator, Optional, Tuple

import torch.distributed as dist

from memcomm import _memcomm


class Communicators:
    """Indices from 0 in the order groups are first seen (None, the default group, first)."""

    def __init__(self) -> None:
        self._index: Dict[Optional[int], int] = {}
        self._seq: Dict[int, Iterator[int]] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        self._index.clear()
        self._seq.clear()

    def index(self, group: Any) -> int:
        """The trace's communicator index of `group` (None: the default group), with its CommInfo."""
        key = id(group) if group is not None else None
        index = self._index.get(key)
        if index is not None:
            return index
        with self._lock:
            if key not in self._index:
                self._index[key] = self._new(group)
            return self._index[key]

    def _new(self, group: Any) -> int:
        index = len(self._index)
        if index > 254:
            raise RuntimeError("memcomm records at most 255 process groups")
        self._seq[index] = itertools.count()
        if dist.is_available() and dist.is_initialized():
            ranks = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)
            size, rank = len(ranks), dist.get_rank(group) if group is not None else dist.get_rank()
            _memcomm.comm_info(index, size, rank, zlib.crc32(repr(sorted(ranks)).encode()) | (1 << 32))
        return index

    def next_collective(self, group: Any) -> Tuple[int, int]:
        """(communicator index, sequence number) for a collective about to be issued on `group`."""
        index = self.index(group)
        return index, next(self._seq[index])
