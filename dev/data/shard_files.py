"""shard_files.py — writing a data tool's output files safely, shared by chat_shards.py and hf_tokenize.py: never
through a symbolic link, each file to a temporary one beside it, synced, then all renamed into place, so a
failure leaves the old files (not a mix of old and new, nor a half-written one). Not here: what the shards
hold (dataloader.h has the formats)."""
import os
import sys
import tempfile


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def check_output(path):
    """An output path must be a regular file or nothing: a symlink is not written through."""
    if os.path.islink(path):
        die(f"{path} is a symbolic link: refusing to write through it (remove it or choose another "
            "--out-prefix)")
    if os.path.exists(path) and not os.path.isfile(path):
        die(f"{path} exists and is not a regular file")


def write_together(files):
    """Writes {path: bytes}: each to a new temporary file beside it (O_EXCL, no symlink followed), synced,
    then all renamed into place, so a failure leaves the old files, not a mix or a half-written one."""
    for path in files:
        check_output(path)
        d = os.path.dirname(path) or "."
        if os.path.exists(d) and not os.path.isdir(d):
            die(f"cannot write {path}: {d} is not a directory")
        try:
            os.makedirs(d, exist_ok=True)
        except OSError as e:
            die(f"cannot make the directory {d}: {e.strerror}")
    mask = os.umask(0)
    os.umask(mask)
    tmps = {}
    try:
        for path, data in files.items():
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".",
                                       prefix=f".{os.path.basename(path)}.", suffix=".tmp")
            tmps[path] = tmp
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), 0o666 & ~mask)  # as open() would make it
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        for path, tmp in tmps.items():
            check_output(path)
            os.replace(tmp, path)  # a symlink made meanwhile is replaced, not followed
        for d in set(os.path.dirname(p) or "." for p in files):
            fd = os.open(d, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    except OSError as e:
        die(f"cannot write {e.filename or ' and '.join(files)}: {e.strerror}")
    finally:  # after a failure (or a symlink made meanwhile): no temporary file left
        for tmp in tmps.values():
            if os.path.lexists(tmp):
                os.unlink(tmp)
