"""The pure core: storage-neutral record shapes, the checkpoint codec, versions.

Nothing in this package imports a database driver or does I/O (a test enforces it).
"""
