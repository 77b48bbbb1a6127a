"""The NameNode's edits log: :mod:`.codec` (its ops as records) and :mod:`.editlog` (the
asyncio :class:`~.editlog.EditLog` driver over the double buffer and one journal per name
dir, and the read side). Framing, segments and the double buffer are shared with the other
roles: :mod:`xdfs.editlog`.
"""
