import warnings, time, torch
torch.set_num_threads(1)
from sklearn.utils.estimator_checks import check_estimator
from sklearn_fed.neural_network import FedMPDDClassifier
from skorch.callbacks import GradientNormClipping
est = FedMPDDClassifier(n_clients=2, client_fraction=1.0, n_directions=256, max_epochs=40,
                        lr=0.1, batch_size=-1, random_state=0, callbacks=[("clip", GradientNormClipping(5.0))])
t=time.time()
res = check_estimator(est, on_fail=None)
for r in res:
    if r["status"] == "failed":
        print(r["check_name"], "|", repr(r["exception"])[:400])
print(len(res), time.time()-t)
