"""Users, passwords, logins and tokens: pure rules (:mod:`.passwords`, :mod:`.login_guard`)
and the driver that authenticates RPC callers (:mod:`.auth`)."""
