"""The memory graph below the apps: how edges are read for the graph algorithms and kept in a graph store.

- ``graph.algorithms``: pure CSR construction and walks (no Django);
- ``graph.store``: the ``GraphStore`` protocol and the SQL store (per-workspace CSR snapshots of the
  edge table), chosen by ``GRAPH_BACKEND``;
- ``graph.bolt``: the Bolt (Neo4j protocol) store;
- ``graph.writes``: what every edge write calls (``graph_touch`` before, ``graph_mirror`` after).

Nothing here imports an app: the tables of the memories app are reached through ``django.apps`` by name,
so memories can call ``graph.writes`` from its services without an import cycle.
"""
