"""The ready-made Flower app components, for ``[tool.flwr.app.components]``::

    [tool.flwr.app.components]
    serverapp = "sklearn_fed.flower.app:serverapp"
    clientapp = "sklearn_fed.flower.app:clientapp"

They are :func:`~sklearn_fed.flower.make_server_app` and
:func:`~sklearn_fed.flower.make_client_app`, made once at import.
"""

from . import _require

_require("._apps")  # a clear ImportError naming the extra when flwr is missing

from ._apps import make_client_app, make_server_app

clientapp = make_client_app()
serverapp = make_server_app()
