#!/usr/bin/env python3
"""A FUSE server that stops answering, for the `hang` hostile tests.

Usage: hang_fuse.py MOUNTPOINT

Opens /dev/fuse, mounts it at MOUNTPOINT (`mount -t fuse -o fd=N,...`; run
it in a private mount namespace), prints `ready <minor>` (the connection's
number under /sys/fs/fuse/connections) and answers INIT and a few requests
for a root directory holding one directory `sub` and one file `img` (1 MiB
of zeros, for a loop device). A line `hang` on standard input makes it stop
reading requests (it keeps /dev/fuse open, so every request waits, and a
fatal signal still interrupts it; the connection's `waiting` file counts
them) and print `hung`; a line `hold` makes it read every request and
answer none (the caller then waits uninterruptibly, until the connection is
aborted) and print `holding`; end of input, or SIGTERM, aborts the
connection and exits. Only the standard library.
"""
import os
import select
import struct
import subprocess
import sys

FUSE_LOOKUP, FUSE_FORGET, FUSE_GETATTR = 1, 2, 3
FUSE_OPEN, FUSE_READ, FUSE_FLUSH = 14, 15, 25
FUSE_STATFS, FUSE_RELEASE, FUSE_INIT = 17, 18, 26
FUSE_OPENDIR, FUSE_READDIR, FUSE_RELEASEDIR = 27, 28, 29
FUSE_ACCESS, FUSE_DESTROY, FUSE_BATCH_FORGET = 34, 38, 42
FUSE_INTERRUPT, FUSE_GETXATTR = 36, 22
ENOENT, ENOSYS, ENODATA = 2, 38, 61

ROOT, SUB, IMG = 1, 2, 3
IMG_SIZE = 1 << 20


def attr(node):
    # struct fuse_attr: ino size blocks atime mtime ctime (u64), atimensec
    # mtimensec ctimensec mode nlink uid gid rdev blksize flags (u32)
    mode, size, nlink = (0o100644, IMG_SIZE, 1) if node == IMG else (0o40755, 0, 2)
    return struct.pack("<6Q10I", node, size, size // 512, 0, 0, 0, 0, 0, 0, mode, nlink, 0, 0, 0, 4096, 0)


def reply(fd, unique, error=0, body=b""):
    os.write(fd, struct.pack("<IiQ", 16 + len(body), -error, unique) + body)


def answer(fd, opcode, unique, node, data):
    if opcode == FUSE_INIT:
        major, minor, readahead, flags = struct.unpack_from("<4I", data)
        # fuse_init_out: major minor max_readahead flags, max_background
        # congestion_threshold (u16), max_write time_gran (u32), max_pages
        # map_alignment (u16), flags2 max_stack_depth, unused[6] (u32)
        body = struct.pack("<4I2H2I2H8I", 7, 31, readahead, 0, 16, 12, 65536, 1, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        reply(fd, unique, body=body)
    elif opcode == FUSE_GETATTR:
        # fuse_attr_out: attr_valid (u64), attr_valid_nsec, dummy (u32): never cached
        reply(fd, unique, body=struct.pack("<QII", 0, 0, 0) + attr(node))
    elif opcode == FUSE_LOOKUP:
        name = data.split(b"\0", 1)[0]
        child = {b"sub": SUB, b"img": IMG}.get(name) if node == ROOT else None
        if child is not None:
            # fuse_entry_out: nodeid generation entry_valid attr_valid (u64),
            # entry_valid_nsec attr_valid_nsec (u32): never cached
            reply(fd, unique, body=struct.pack("<4Q2I", child, 1, 0, 0, 0, 0) + attr(child))
        else:
            reply(fd, unique, ENOENT)
    elif opcode == FUSE_OPEN:
        # fuse_open_out: fh (u64), open_flags, backing_id (u32)
        reply(fd, unique, body=struct.pack("<QII", 1, 0, 0))
    elif opcode == FUSE_READ:
        # fuse_read_in: fh offset (u64), size (u32), ...
        _, offset, size = struct.unpack_from("<QQI", data)
        reply(fd, unique, body=bytes(max(0, min(size, IMG_SIZE - offset))))
    elif opcode == FUSE_FLUSH:
        reply(fd, unique)
    elif opcode == FUSE_OPENDIR:
        reply(fd, unique, body=struct.pack("<QII", 1, 0, 0))
    elif opcode in (FUSE_READDIR,):
        reply(fd, unique)  # empty: end of directory
    elif opcode in (FUSE_RELEASEDIR, FUSE_RELEASE):
        reply(fd, unique)
    elif opcode == FUSE_STATFS:
        reply(fd, unique, body=struct.pack("<5Q10I", 0, 0, 0, 0, 0, 4096, 255, 4096, 0, 0, 0, 0, 0, 0, 0))
    elif opcode in (FUSE_FORGET, FUSE_BATCH_FORGET, FUSE_INTERRUPT):
        pass  # no reply
    elif opcode == FUSE_GETXATTR:
        reply(fd, unique, ENODATA)
    else:
        reply(fd, unique, ENOSYS)


def connection(mount_point):
    """The minor device number of the FUSE mount at `mount_point`."""
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            fields = line.split(b" ")
            if fields[4] == os.fsencode(mount_point) and b"hangfuse" in line:
                return int(fields[2].split(b":")[1])
    raise SystemExit("mounted, but not in mountinfo")


def main():
    mount_point = sys.argv[1]
    fd = os.open("/dev/fuse", os.O_RDWR)
    proc = subprocess.Popen(
        ["mount", "-t", "fuse", "-o",
         f"fd={fd},rootmode=40000,user_id=0,group_id=0,allow_other",
         "hangfuse", mount_point],
        pass_fds=[fd],
    )
    hung = False
    holding = False
    ready = False
    stdin = sys.stdin.fileno()
    while True:
        # /dev/fuse is read only once mounted (before, reads fail).
        # Hung, it reads nothing more: a request left unread stays pending,
        # which a fatal signal can still interrupt (one read and never
        # answered could not be, short of aborting the connection).
        watch = [stdin] if hung or proc is not None else [fd, stdin]
        readable, _, _ = select.select(watch, [], [], 0.05 if proc is not None else None)
        if proc is not None and proc.poll() is not None:
            if proc.returncode != 0:
                print(f"mount failed: {proc.returncode}", flush=True)
                return 1
            proc = None
        if proc is None and not ready:
            # Not stat: answering it is this very loop's job.
            print(f"ready {connection(mount_point)}", flush=True)
            ready = True
        if stdin in readable:
            line = sys.stdin.readline()
            if not line:
                return 0  # closing /dev/fuse aborts the connection
            if line.strip() == "hang":
                hung = True
                print("hung", flush=True)
            elif line.strip() == "hold":
                holding = True
                print("holding", flush=True)
            continue
        if fd in readable:
            try:
                data = os.read(fd, 1 << 17)
            except OSError as e:
                if e.errno == ENOENT:  # an interrupted request: gone already
                    continue
                return 0  # unmounted (ENODEV)
            length, opcode, unique, node = struct.unpack_from("<IIQQ", data)
            if not holding:
                answer(fd, opcode, unique, node, data[40:length])


if __name__ == "__main__":
    sys.exit(main())
