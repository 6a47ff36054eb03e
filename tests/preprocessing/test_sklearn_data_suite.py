"""scikit-learn's own scaler tests, run against FederatedStandardScaler and FederatedMinMaxScaler.

The installed scikit-learn's ``sklearn/preprocessing/tests/test_data.py``
through ``tests/_sklearn_suite.py``: each test that names ``StandardScaler``
or ``MinMaxScaler`` runs twice, every fit (and ``partial_fit``) of a subject
split among 1 and 7 clients. The adapters have exactly scikit-learn's
constructors, its parameter validation, and no numerics of their own.
"""

import sys

import pytest
from sklearn.preprocessing import MinMaxScaler, StandardScaler

from sklearn_fed.preprocessing import FederatedMinMaxScaler, FederatedStandardScaler
from tests._sklearn_suite import SplitFits, adapter, install, main, scikit_learn_tests

sk = scikit_learn_tests("sklearn.preprocessing.tests.test_data")

TITLE = "scikit-learn's test_data.py (scalers) against the federated adapters"
SKIP_RULE = """\
Which of scikit-learn's test_data.py tests apply, and what stands in for what:
  subject  A test that names StandardScaler or MinMaxScaler (in its code, the
           module helpers it calls, or its parameters) tests them: both become
           adapters of FederatedStandardScaler and FederatedMinMaxScaler (the
           only scalers sklearn_fed has); every other class, and the functions
           scale and minmax_scale, stay scikit-learn's.
  not collected  tests that cannot name either (the other scalers' tests).
  skipped, with the reason shown:
   [no subject fitted]    the test ran but fitted no adapter (e.g. a
                          parametrization with another scaler);
   [array API]            array API dispatch (sklearn_fed computes with numpy);
   [callbacks]            the test uses scikit-learn's experimental callback
                          API (sklearn.callback), which sklearn_fed's
                          protocol-driven fits do not call."""


class _Fits(SplitFits):
    def refuse(self, X, y, kwargs):
        from sklearn import get_config

        if get_config().get("array_api_dispatch"):
            pytest.skip("[array API] dispatch")


ADAPTERS = {
    StandardScaler: adapter(FederatedStandardScaler, StandardScaler, _Fits),
    MinMaxScaler: adapter(FederatedMinMaxScaler, MinMaxScaler, _Fits),
}


def _no_callbacks(name, names, classes, params):
    if "RecordingCallback" in names or "set_callbacks" in names:
        pytest.skip("[callbacks] scikit-learn's callback API")


LEFT_OUT = install(globals(), sk, [(StandardScaler,), (MinMaxScaler,)], ADAPTERS,
                   prefilter=True, veto=_no_callbacks)

if __name__ == "__main__":
    sys.exit(main(__file__, SKIP_RULE))
