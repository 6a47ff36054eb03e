"""scikit-learn's own OneHotEncoder tests, run against FederatedOneHotEncoder.

The installed scikit-learn's ``sklearn/preprocessing/tests/test_encoders.py``
through ``tests/_sklearn_suite.py``: each test that names ``OneHotEncoder``
runs twice, every fit of a subject split among 1 and 7 clients. The adapter
has exactly OneHotEncoder's constructor and parameter validation, and no
numerics of its own.
"""

import sys

from sklearn.preprocessing import OneHotEncoder

from sklearn_fed.preprocessing import FederatedOneHotEncoder
from tests._sklearn_suite import adapter, install, main, scikit_learn_tests

sk = scikit_learn_tests("sklearn.preprocessing.tests.test_encoders")

TITLE = "scikit-learn's test_encoders.py (OneHotEncoder) against the federated adapter"
SKIP_RULE = """\
Which of scikit-learn's test_encoders.py tests apply, and what stands in for what:
  subject  A test that names OneHotEncoder (in its code, the module helpers it
           calls, or its parameters) tests it: OneHotEncoder becomes the
           adapter of FederatedOneHotEncoder; OrdinalEncoder and TargetEncoder
           stay scikit-learn's.
  not collected  tests that cannot name OneHotEncoder (OrdinalEncoder's).
  skipped, with the reason shown:
   [no subject fitted]    the test ran but fitted no adapter (e.g. a
                          parametrization with OrdinalEncoder)."""

ADAPTERS = {OneHotEncoder: adapter(FederatedOneHotEncoder, OneHotEncoder)}
LEFT_OUT = install(globals(), sk, [(OneHotEncoder,)], ADAPTERS, prefilter=True)

if __name__ == "__main__":
    sys.exit(main(__file__, SKIP_RULE))
