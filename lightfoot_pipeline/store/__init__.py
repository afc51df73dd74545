"""Where the index lives: Delta tables and LanceDB vectors under one root, committed together.

``store`` (reads, the writer's lock), ``transaction`` (staging and commits), ``recovery`` (undoing a
crashed commit), ``tables`` (one schema per concept), ``fingerprint`` (the
order-independent hash that proves two indexes equal), ``vectors`` (vector caches) and ``ledger``
(the cost of every model call).
"""
