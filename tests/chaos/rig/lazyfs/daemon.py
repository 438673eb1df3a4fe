"""The lazy filesystem's process: ``python -m tests.chaos.rig.lazyfs.daemon
BACKING MOUNTPOINT --control SOCKET``. Serves until unmounted; then, if a power
cut was armed, drops everything not durable, else keeps it all, and exits."""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading

from mfusepy import FUSE

from tests.chaos.rig.lazyfs.control import ControlServer
from tests.chaos.rig.lazyfs.filesystem import NAME_MODELS, LazyFS

logger = logging.getLogger("lazyfs")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.rig.lazyfs.daemon")
    parser.add_argument("backing")
    parser.add_argument("mountpoint")
    parser.add_argument("--control", required=True, help="the control socket's path")
    parser.add_argument("--trash", help="default: BACKING.lazyfs-trash")
    parser.add_argument(
        "--names", choices=NAME_MODELS, default="strict", help="when name changes are durable"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s lazyfs %(message)s")
    trash = args.trash or args.backing.rstrip("/") + ".lazyfs-trash"
    fs = LazyFS(args.backing, trash, args.names)
    if os.path.exists(args.control):
        os.unlink(args.control)
    control = ControlServer(args.control, fs)
    threading.Thread(target=control.serve_forever, daemon=True).start()
    try:
        # Not direct_io: the kernel's page cache stays, so shared mmap works and dirty
        # pages reach write() on msync, writeback or unmount. hard_remove: unlink is
        # ours (entries.py), not libfuse's hidden renames.
        FUSE(
            fs, args.mountpoint, foreground=True, hard_remove=True, use_ino=True,
            fsname="lazyfs", default_permissions=True,
        )  # fmt: skip
    finally:
        control.server_close()
        if control.power_cut_armed.is_set():
            logger.info("power cut: %s", json.dumps({**fs.stats(), **fs.power_cut()}))
        else:
            fs.keep_everything()
            logger.info("unmounted; everything kept")


if __name__ == "__main__":
    main()
