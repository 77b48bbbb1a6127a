"""RPC handlers of the NameNode's services: clients and admins (:mod:`.client`),
DataNodes (:mod:`.datanode`) and BackupNodes (:mod:`.backup`)."""
