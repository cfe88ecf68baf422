"""Reading a ``torch.distributed.checkpoint`` (DCP) folder without running code from it.

DCP's own ``torch.distributed.checkpoint.FileSystemReader`` reads the folder's ``.metadata``
with plain :func:`pickle.load`: a checkpoint from someone else (a shared run folder, a downloaded
one) could name any callable there and have it called on load. This module reads that file
with :class:`MetadataUnpickler`, which builds only the classes a DCP ``Metadata`` of tensors is made
of (the list below was read off the pickles this project's sharded checkpoints write), and refuses
any other global in one line naming the file and the global (:class:`UnsafeCheckpoint`);
:func:`safe_reader` is DCP's reader with that in place of its own metadata read.

What the metadata then says is checked too, before any shard is opened:

* every entry describes a tensor. A bytes entry would make DCP's planner ``torch.load`` a shard with
  ``weights_only=False`` (arbitrary pickle again); asyncrl's shards hold tensors only;
* every shard file it points at is a plain file name inside the folder (no ``..``, no ``/``), so a
  crafted metadata cannot make a load read a file elsewhere into the optimizer's state.

The shards' tensors themselves DCP reads with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import functools
import pickle
from pathlib import Path

import torch

from asyncrl.core.user_code import first_line

# (module, name) pairs a tensor-only DCP Metadata pickles, on torch 2.6 and later
_DCP_METADATA = "torch.distributed.checkpoint.metadata"
ALLOWED_GLOBALS = frozenset({
    (_DCP_METADATA, "Metadata"),
    (_DCP_METADATA, "MetadataIndex"),
    (_DCP_METADATA, "StorageMeta"),
    (_DCP_METADATA, "TensorProperties"),
    (_DCP_METADATA, "TensorStorageMetadata"),
    (_DCP_METADATA, "ChunkStorageMetadata"),
    (_DCP_METADATA, "_MEM_FORMAT_ENCODING"),  # an Enum of three ints
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),  # a lookup of torch's layouts by name, nothing else
    ("pathlib", "PosixPath"),  # the checkpoint_id the writer recorded
    ("pathlib._local", "PosixPath"),  # the same class, as Python 3.13+ names its module
    ("collections", "OrderedDict"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
})


class UnsafeCheckpoint(ValueError):
    """A checkpoint file that would run code or reach outside its folder if loaded (never loaded)."""


class MetadataUnpickler(pickle.Unpickler):
    """An unpickler that builds DCP metadata classes, torch dtypes and plain containers only."""

    def __init__(self, file, path: Path):
        super().__init__(file)
        self.path = path

    def find_class(self, module: str, name: str):
        if (module, name) in ALLOWED_GLOBALS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(torch.__dict__.get(name), torch.dtype):
            return torch.__dict__[name]
        raise UnsafeCheckpoint(f"{self.path}: refusing to unpickle the global {_shown(f'{module}.{name}')} (not "
                               "part of a checkpoint's metadata; the file may have been crafted to run code)")


def _shown(text: str) -> str:
    """A name read from the file, kept to one short line however it was crafted."""
    return text if text.isprintable() and len(text) <= 120 else repr(text[:120])


def read_metadata_file(path: Path):
    """The DCP ``Metadata`` in ``path``, unpickled with the allow-list and checked (see the module)."""
    from torch.distributed.checkpoint.metadata import Metadata

    try:
        with open(path, "rb") as file:
            metadata = MetadataUnpickler(file, path).load()
    except UnsafeCheckpoint:
        raise
    except Exception as err:  # noqa: BLE001 (a torn pickle, or a class built with arguments it refuses)
        raise ValueError(f"{path}: unreadable checkpoint metadata ({first_line(err)})") from None
    if not isinstance(metadata, Metadata):
        raise UnsafeCheckpoint(f"{path}: holds a {type(metadata).__name__}, not a checkpoint's metadata")
    _check_entries(metadata, path)
    return metadata


def _check_entries(metadata, path: Path) -> None:
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    if not isinstance(metadata.state_dict_metadata, dict) or not isinstance(metadata.storage_data, dict):
        raise UnsafeCheckpoint(f"{path}: its entries are not laid out as a checkpoint's metadata")
    for key, entry in metadata.state_dict_metadata.items():
        if not isinstance(entry, TensorStorageMetadata):
            raise UnsafeCheckpoint(f"{path}: entry {key!r} is a {type(entry).__name__}, not a tensor; "
                                   "asyncrl's checkpoints hold tensors only")
    for info in metadata.storage_data.values():
        name = getattr(info, "relative_path", None)
        if not isinstance(info, _StorageInfo) or not _plain_file_name(name):
            raise UnsafeCheckpoint(f"{path}: names the shard file {name!r}, which is not a file of its own "
                                   "folder")


def _plain_file_name(name) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\\" not in name \
        and "\0" not in name


def safe_reader(folder: Path | str):
    """DCP's file-system reader for ``folder``, with ``.metadata`` read by :func:`read_metadata_file`."""
    return _safe_reader_class()(str(folder))


@functools.cache
def _safe_reader_class():
    """Built on first use: importing torch.distributed.checkpoint costs most of a second, and most
    processes that import the checkpoint code never read shards."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args, **kwargs):
            rank = kwargs.get("rank")  # a rank's own metadata, where one was written without collectives
            name = ".metadata" if rank is None else f"__{rank}.metadata"
            metadata = read_metadata_file(Path(self.path) / name)
            if getattr(metadata, "storage_meta", None) is None:  # as FileSystemReader does
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader
