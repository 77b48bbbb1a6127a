"""The namespace, a pure core: the inode tree and its path resolution, paths,
permissions, the edit ops and image records, the image codec of the tree, writer leases and
the trash rules."""
