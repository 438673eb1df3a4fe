"""A FUSE filesystem of the chaos rig's own that loses, on a power cut, what
was not made durable (like Jepsen's LazyFS), and can play a full disk.

- filesystem.py: the operations (mfusepy, libfuse 3): a passthrough to a
  backing directory, with the bookkeeping of pending.py (file data written
  since the file's last fsync) and entries.py (names created, removed or
  renamed since their directory's last fsync: the model is in its docstring);
- control.py: the daemon's control socket (stats, the byte cap, arming a power
  cut); daemon.py: the process; mount.py: ``LazyMount``, start/stop by PID.

A power cut of a node: SIGKILL the node, ``LazyMount.power_cut()`` (the
kernel flushes the dead process's dirty mmap pages to the daemon on unmount;
then every pending write and entry change is undone in the backing directory),
``start()`` again, restart the node.
"""
