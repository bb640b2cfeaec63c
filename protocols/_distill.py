"""Torch pieces of Sinkhorn distillation: models, (DP-)training, the batched Sinkhorn and KL
losses, teacher weightings and the evaluation metrics. Pure functions; the protocol decides who
runs them and what crosses the bus.

The Sinkhorn loss is POT's batched entropic solver (``ot.batch.solve_batch``, log-domain,
``reg_type="kl"``) on torch tensors, so its ``value`` is the paper's eq. 2
:math:`T_\\varepsilon(\\mu,\\nu)=\\min_\\pi \\langle\\pi,C\\rangle+\\varepsilon\\,KL(\\pi\\,\\|\\,\\mu\\otimes\\nu)`.
Gradients use ``grad="last_step"`` (differentiating the last Sinkhorn iteration): in POT 0.9.7
``grad="envelope"`` returns a zero gradient with respect to the marginals (measured; see README).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Sequence

import numpy as np
import ot
import ot.batch
import torch
from sklearn.metrics import accuracy_score, f1_score
from torch import nn

from testbed.errors import TestbedError
from testbed.ot import pot_on_torch

__all__ = [
    "MLP",
    "deterministic_torch",
    "kl_loss",
    "label_cost",
    "predict_proba",
    "probability_bias",
    "scores",
    "semantic_distance",
    "sinkhorn_loss",
    "teacher_weights",
    "train_classifier",
    "train_student",
]

DTYPE = torch.float64


@contextlib.contextmanager
def deterministic_torch(seed: int):
    """Single thread, deterministic algorithms and a fixed seed; previous settings restored."""
    threads = torch.get_num_threads()
    det = torch.are_deterministic_algorithms_enabled()
    state = torch.random.get_rng_state()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(int(seed))
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(det)
        torch.random.set_rng_state(state)


def label_cost(coords: np.ndarray, metric: str = "euclidean") -> np.ndarray:
    """Ground cost between label coordinates (``ot.dist``), e.g. taxi-cab on a 1-D ordinal axis."""
    c = np.asarray(coords, dtype=np.float64)
    return np.maximum(ot.dist(c, c, metric=metric), 0.0)


class MLP(nn.Module):
    """ReLU multilayer perceptron returning logits."""

    def __init__(self, d_in: int, hidden: Sequence[int], n_out: int):
        super().__init__()
        layers: list[nn.Module] = []
        last = d_in
        for h in hidden:
            layers += [nn.Linear(last, h), nn.ReLU()]
            last = h
        layers.append(nn.Linear(last, n_out))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def _tensor(a) -> torch.Tensor:
    return torch.tensor(np.asarray(a, dtype=np.float64), dtype=DTYPE)


def predict_proba(model: nn.Module, X: np.ndarray) -> np.ndarray:
    model.eval()
    with torch.no_grad():
        return torch.softmax(model(_tensor(X)), dim=1).numpy().astype(np.float64)


def _hide_dp_sgd_notices() -> None:
    """Hide three warnings a DP-SGD training would print on a user's screen, each about a choice
    made on purpose. Installed in the process's filters when a DP-SGD training starts (an
    identical filter replaces the last, so calling it again adds nothing): teachers may train on
    several threads at once, where a ``warnings.catch_warnings`` block would race, and filters set
    at import would be lost wherever the import ran inside such a block."""
    # opacus's "Secure RNG turned off": DP-SGD's noise is drawn from a generator seeded from the
    # scenario's seed, so that the same seed gives the same run (a cryptographically secure
    # generator, opacus's ``secure_mode``, cannot be seeded); dp_sgd_teachers's docs say so
    warnings.filterwarnings(
        "ignore", message="Secure RNG turned off", module="opacus.privacy_engine"
    )
    # torch's "Full backward hook is firing when gradients are computed with respect to module
    # outputs": opacus's per-sample gradients hook the first layer, whose input (the data) needs
    # no gradient; the hook then fires on the layer's output gradient, which is exactly what
    # opacus reads (its "backprops"). Making the data require a gradient would only add work.
    warnings.filterwarnings(
        "ignore", message="Full backward hook is firing when gradients are computed"
    )
    # opacus's "Optimal order is the largest alpha" when ε is read: still a valid bound, on the
    # orders opacus calibrated the noise with (the privacy ledger hides it for its events too)
    warnings.filterwarnings(
        "ignore", message="Optimal order is the", module="opacus.accountants.analysis.rdp"
    )


def train_classifier(
    X: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    hidden: Sequence[int],
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
    dp: dict | None = None,
) -> tuple[nn.Module, float | None]:
    """Cross-entropy training (the paper trains local models with CE). With ``dp`` =
    ``{epsilon, delta, max_grad_norm}`` the training is DP-SGD through opacus's
    ``make_private_with_epsilon`` (Poisson sampling, RDP accountant); returns the model and
    opacus's spent ε (None without DP)."""
    gen = torch.Generator().manual_seed(int(seed))
    model = MLP(X.shape[1], hidden, n_classes).to(DTYPE)
    ds = torch.utils.data.TensorDataset(_tensor(X), torch.tensor(np.asarray(y), dtype=torch.long))
    loader = torch.utils.data.DataLoader(
        ds, batch_size=min(batch_size, len(ds)), shuffle=True, generator=gen
    )
    eps_spent = None
    if dp is not None:
        from opacus import PrivacyEngine  # opacus: DP-SGD only

        _hide_dp_sgd_notices()

        opt = torch.optim.Adam(model.parameters(), lr=lr)  # opacus wraps any optimizer
        engine = PrivacyEngine(accountant="rdp")
        try:
            model, opt, loader = engine.make_private_with_epsilon(
                module=model,
                optimizer=opt,
                data_loader=loader,
                target_epsilon=float(dp["epsilon"]),
                target_delta=float(dp["delta"]),
                epochs=epochs,
                max_grad_norm=float(dp["max_grad_norm"]),
                noise_generator=torch.Generator().manual_seed(int(seed) + 1),
            )
        except ValueError as exc:  # opacus: "The privacy budget is too low."
            raise TestbedError(
                f"dp_sgd.epsilon {dp['epsilon']:g} at delta {dp['delta']:g} over {epochs} "
                f"epochs is below what opacus can calibrate ({exc}); raise epsilon"
            ) from None
    else:
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    lossf = nn.CrossEntropyLoss()
    for _ in range(epochs):
        model.train()
        for xb, yb in loader:
            if len(xb) == 0:  # Poisson sampling can draw an empty batch
                continue
            opt.zero_grad()
            lossf(model(xb), yb).backward()
            opt.step()
    if dp is not None:
        eps_spent = float(engine.get_epsilon(float(dp["delta"])))
        model = model._module  # unwrap GradSampleModule for inference
    return model, eps_spent


def probability_bias(P_noise: np.ndarray, mode: str = "argmax") -> np.ndarray:
    """Probability bias B on noise inputs: ``argmax`` = share of noise inputs predicted as each
    label (the paper's App. C.1), ``mean`` = mean predicted distribution."""
    P = np.asarray(P_noise, dtype=np.float64)
    if mode == "argmax":
        return np.bincount(P.argmax(1), minlength=P.shape[1]) / P.shape[0]
    return P.mean(0)


def teacher_weights(
    P: np.ndarray, scheme: str, sizes: Sequence[float] | None = None, biases=None
) -> np.ndarray:
    """Per-sample teacher weights W_{B_k}(h_k(x)), normalised over teachers (Alg. 1, line 11).

    ``P``: (K, n, C) teacher predictions. A: 1; D: local dataset size; U: L2 distance from the
    uniform distribution; E: L2 distance from the teacher's probability bias B_k.
    """
    K, n, C = P.shape
    if scheme == "A":
        W = np.ones((K, n))
    elif scheme == "D":
        W = np.repeat(np.asarray(sizes, dtype=np.float64)[:, None], n, axis=1)
    elif scheme == "U":
        W = np.linalg.norm(P - 1.0 / C, axis=2)
    elif scheme == "E":
        W = np.linalg.norm(P - np.asarray(biases, dtype=np.float64)[:, None, :], axis=2)
    else:
        raise ValueError(f"unknown weighting {scheme!r}")
    tot = W.sum(0, keepdims=True)
    # a sample on which every teacher sits exactly at its bias gets uniform weights
    return np.where(tot > 0, W / np.where(tot > 0, tot, 1.0), 1.0 / K)


#: a Sinkhorn plan whose row sums miss the student's distribution by more than this is counted
#: as unconverged (the column sums are exact after the last half-iteration)
MARGINAL_TOL = 1e-6


def sinkhorn_loss(
    p: torch.Tensor,
    q: torch.Tensor,
    M: torch.Tensor,
    reg: float,
    max_iter: int = 500,
    tol: float = 1e-7,
    linear: bool = False,
    stats: dict | None = None,
) -> torch.Tensor:
    """Batched :math:`T_\\varepsilon(p_i, q_i)` (eq. 2) with POT; ``p``, ``q``: (B, C).

    ``q`` (the teacher side) is clamped to >= 1e-9 and renormalised: an exact zero makes the
    log-domain solver's gradient NaN. The value is eq. 2's only once the iterations converged
    (``tol``); at ``max_iter`` it is the last iterate's, which for a small ``reg`` can be far
    from it (even below the unregularised OT cost). ``stats``, when given, counts the pairs
    (``pairs``) and those whose plan still misses ``p`` by more than :data:`MARGINAL_TOL`
    (``unconverged``)."""
    pot_on_torch()  # POT imported without torch (testbed.ot.NO_TORCH) learns torch's tensors
    B, C = p.shape
    # the log-domain solver takes log(b): an exact zero gives a NaN gradient, so clamp
    q = q.clamp_min(1e-9)
    q = q / q.sum(1, keepdim=True)
    res = ot.batch.solve_batch(
        M.expand(B, C, C),
        reg,
        a=p,
        b=q,
        max_iter=max_iter,
        tol=tol,
        method="log_sinkhorn",
        reg_type="kl",
        grad="last_step",
    )
    if stats is not None:  # a pair whose plan misses its marginal p by more than 1e-6
        with torch.no_grad():
            off = (res.plan.sum(2) - p).abs().amax(1) > MARGINAL_TOL
        stats["pairs"] = stats.get("pairs", 0) + B
        stats["unconverged"] = stats.get("unconverged", 0) + int(off.sum())
    return res.value_linear if linear else res.value


def kl_loss(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """:math:`KL(q \\| p)` per row (teacher q, student p): the entropy-based baseline."""
    return (q * (torch.log(q.clamp_min(1e-12)) - torch.log(p.clamp_min(1e-12)))).sum(1)


def train_student(
    X: np.ndarray,
    targets: np.ndarray,
    weights: np.ndarray,
    hidden: Sequence[int],
    loss: str,
    M: np.ndarray,
    reg: float,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
    sinkhorn_iter: int = 500,
    init: nn.Module | None = None,
    stats: dict | None = None,
) -> nn.Module:
    """Fit the student to eq. 3-4: mean over samples of sum_k w_k(x) L(h_theta(x), h_k(x)).
    ``stats``: :func:`sinkhorn_loss`'s convergence counts over every batch of the training.

    ``targets``: (K, n, C) teacher distributions (clamped to >= 1e-9 and renormalised so the
    log-domain solver never sees log 0); ``weights``: (K, n), normalised over teachers.
    """
    K, n, C = targets.shape
    T = np.clip(np.asarray(targets, dtype=np.float64), 1e-9, None)
    T = _tensor(T / T.sum(2, keepdims=True))
    Wt = _tensor(weights)
    Xt = _tensor(X)
    Mt = _tensor(M)
    model = init if init is not None else MLP(X.shape[1], hidden, C).to(DTYPE)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(int(seed))
    bs = min(batch_size, n)
    for _ in range(epochs):
        model.train()
        perm = torch.randperm(n, generator=gen)
        for start in range(0, n, bs):
            idx = perm[start : start + bs]
            p = torch.softmax(model(Xt[idx]), dim=1)
            b = len(idx)
            q = T[:, idx, :].reshape(K * b, C)
            pk = p.unsqueeze(0).expand(K, b, C).reshape(K * b, C)
            if loss == "sinkhorn":
                per = sinkhorn_loss(pk, q, Mt, reg, max_iter=sinkhorn_iter, stats=stats)
            else:
                per = kl_loss(pk, q)
            val = (per.reshape(K, b) * Wt[:, idx]).sum(0).mean()
            opt.zero_grad()
            val.backward()
            opt.step()
    return model


def semantic_distance(P: np.ndarray, y: np.ndarray, coords: np.ndarray) -> dict[str, float]:
    """Paper Sec. 5.4: Euclidean distance between the expected label coordinate under the
    predicted distribution and the true label's coordinate; ``labelwise`` averages the per-label
    means (the paper's choice for imbalanced sets), ``mean`` averages over rows."""
    c = np.asarray(coords, dtype=np.float64)
    expected = np.asarray(P, dtype=np.float64) @ c
    d = np.linalg.norm(expected - c[np.asarray(y)], axis=1)
    per_label = [float(d[y == k].mean()) for k in np.unique(y)]
    return {"labelwise": float(np.mean(per_label)), "mean": float(d.mean())}


def scores(P: np.ndarray, y: np.ndarray, coords: np.ndarray) -> dict[str, float]:
    """Macro-F1, accuracy (sklearn) and semantic distance of predictions ``P`` on labels ``y``."""
    pred = P.argmax(1)
    sd = semantic_distance(P, y, coords)
    return {
        "macro_f1": float(
            f1_score(y, pred, average="macro", labels=np.arange(P.shape[1]), zero_division=0)
        ),
        "accuracy": float(accuracy_score(y, pred)),
        "semantic_distance": sd["labelwise"],
        "semantic_distance_mean": sd["mean"],
    }
