"""scikit-learn's own estimator checks; expected failures are listed with their reason (strict)."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_fed import (
    FederatedEmpiricalCovariance,
    FederatedLogisticRegression,
    FederatedMinMaxScaler,
    FederatedOneHotEncoder,
    FederatedPCA,
    FederatedRidge,
    FederatedRidgeClassifier,
    FederatedRidgeClassifierCV,
    FederatedRidgeCV,
    FederatedSimpleImputer,
    FederatedStandardScaler,
)
from sklearn_fed.compose import FederatedColumnTransformer
from sklearn_fed.pipeline import FederatedPipeline, make_federated_pipeline

# scikit-learn's own Pipeline fails these two: its steps are parameters, and
# fitting fits them (a pipeline's fitted state lives in its steps).
_PIPELINE = {
    "check_estimators_overwrite_params": "fails for scikit-learn's Pipeline too: fitting "
    "fits the steps, which are parameters",
    "check_dont_overwrite_parameters": "fails for scikit-learn's Pipeline too: fitting "
    "fits the steps, which are parameters",
}
# scikit-learn's own ColumnTransformer fails these (passthrough columns are not
# validated, and X must have columns to select from).
_COLUMN_TRANSFORMER = {
    "check_estimators_empty_data_messages": "fails for scikit-learn's ColumnTransformer "
    "too: selecting columns of an empty table raises first",
    "check_estimators_nan_inf": "fails for scikit-learn's ColumnTransformer too: "
    "passthrough columns are not checked",
    "check_transformer_data_not_an_array": "fails for scikit-learn's ColumnTransformer "
    "too: passthrough keeps the object array",
    "check_fit2d_predict1d": "fails for scikit-learn's ColumnTransformer too: its error "
    "for 1-D input does not say 'Reshape your data'",
}


def _expected_failures(estimator):
    if isinstance(estimator, FederatedPipeline):
        return _PIPELINE
    if isinstance(estimator, FederatedColumnTransformer):
        return _COLUMN_TRANSFORMER
    return {}


@parametrize_with_checks(
    [
        FederatedRidge(),
        FederatedRidgeCV(),
        FederatedStandardScaler(),
        FederatedMinMaxScaler(),
        FederatedOneHotEncoder(),
        FederatedSimpleImputer(),
        FederatedPCA(),
        FederatedEmpiricalCovariance(),
        FederatedRidgeClassifier(),
        FederatedRidgeClassifierCV(),
        FederatedLogisticRegression(),
        make_federated_pipeline(FederatedStandardScaler(), FederatedRidge()),
        make_federated_pipeline(FederatedStandardScaler(), FederatedLogisticRegression()),
        FederatedColumnTransformer(
            [("scale", FederatedStandardScaler(), [0])], remainder="passthrough"
        ),
    ],
    expected_failed_checks=_expected_failures,
)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)
