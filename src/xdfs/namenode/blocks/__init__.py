"""Block management: which DataNode holds which replica (the block map), DataNode
liveness, placement of new replicas, the replication monitor and its queues, safe mode,
lease and block recovery decisions, fsck and the block map export. Pure cores; the
NameNode's server drives them."""
