"""``python -m sklearn_fed.flower.worker --socket PATH``: a site's long-running worker.

Start one next to each SuperNode, and give the SuperNode the same path in
its node config (``worker-socket="PATH"``); the app's ClientApp component
is ``sklearn_fed_site:clientapp``. See :doc:`/deploying_flower`.
"""

from . import _require

_require("._apps")  # a clear ImportError naming the extra when flwr is missing

from ._worker import SiteWorker, main, serve

__all__ = ["SiteWorker", "main", "serve"]

if __name__ == "__main__":
    main()
