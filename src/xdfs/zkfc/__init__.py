"""The ZooKeeper failover controller (``xdfs zkfc``, HDFS's ZKFC): a health monitor and an
elector per NameNode; see :mod:`xdfs.zkfc.elector` for the rules and
:mod:`xdfs.zkfc.server` for the driver."""
