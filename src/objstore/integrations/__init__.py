"""Integrations: objstore under other frameworks' interfaces, and other engines under objstore's.

Each integration is one subpackage here (``objstore.integrations.<name>``), imported only by its
users: nothing in ``objstore.storage``, ``objstore.runs``, ``objstore.journal`` or
``objstore.lifecycle`` imports this package (``tests/test_layers.py``), so an optional dependency
(LangGraph, an S3 client) is never needed by the base install. An integration uses only the public
API of the layers below; where it needs something they lack, the layer gains it for every user.
"""
