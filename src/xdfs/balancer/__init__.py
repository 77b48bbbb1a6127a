"""The balancer: a client tool that moves replicas from over-used to under-used DataNodes
(``xdfs balancer``); the plan is a pure core (:mod:`.plan`), the runner drives it."""
