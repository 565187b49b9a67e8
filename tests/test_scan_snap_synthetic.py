"""The statistics of the Syn-Medium and Adam checks of Scan and Snap (Tian et al. 2023, Figs. 5, 6, 11, 12):
:mod:`verify.models.scan_snap_synthetic`, each against a computation of its own (a hand-written step function, an
explicit softmax, a sort), and its input validation."""

import numpy as np
import pytest

from verify.models.scan_snap_synthetic import (descent_rate, query_attention, recall_curve, syn_medium,
                                               top_distinct)


def test_query_attention_is_the_softmax_of_the_query_rows():
    classes = syn_medium(3)
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(classes.M, classes.M))
    a = query_attention(Z, classes)
    for n, m in enumerate(classes.psi):
        e = np.exp(Z[m] - Z[m].max())
        np.testing.assert_allclose(a[n], e / e.sum(), rtol=1e-13)
    with pytest.raises(ValueError, match="^Z:"):
        query_attention(Z[:-1], classes)


def test_descent_rate_of_the_uniform_map_is_the_slope_of_a_unit_step():
    """At Z = 0 every distinct token has attention 1/M: the recall is 1 up to x = 1 and 0 beyond, and the descent
    rate is minus the least-squares slope of that step on the grid (numpy.polyfit)."""
    classes = syn_medium(5)
    a = query_attention(np.zeros((classes.M, classes.M)), classes)
    x = np.linspace(0.5, 2.0, 61)
    step = (x <= 1.0 + 1e-12).astype(float)
    assert descent_rate(a, classes) == pytest.approx(-np.polyfit(x, step, 1)[0], rel=1e-12)


def test_descent_rate_is_slower_for_a_sparser_map():
    """Spreading the distinct tokens' logits (a sparser map) lowers the descent rate: the recall leaves the
    window's ends at values strictly between 0 and 1."""
    classes = syn_medium(3)
    rng = np.random.default_rng(1)
    base = rng.uniform(-0.05, 0.05, (classes.M, classes.M))
    spread = base.copy()
    spread[:, classes.distinct.any(0)] += rng.normal(0, 1.0, classes.distinct.any(0).sum())
    d0 = descent_rate(query_attention(base, classes), classes)
    d1 = descent_rate(query_attention(spread, classes), classes)
    assert d1 < 0.7 * d0
    with pytest.raises(ValueError, match="^lo:"):
        descent_rate(query_attention(base, classes), classes, lo=2.0, hi=1.0)
    with pytest.raises(ValueError, match="^points:"):
        descent_rate(query_attention(base, classes), classes, points=1)


def test_recall_curve_counts_distinct_tokens_at_or_above_the_threshold():
    classes = syn_medium(1)
    rng = np.random.default_rng(2)
    c = rng.dirichlet(np.ones(classes.M), size=classes.K)
    th = [0.01, 0.03, 0.1]
    want = [np.mean([np.mean(c[n, classes.distinct[n]] >= t) for n in range(classes.K)]) for t in th]
    np.testing.assert_allclose(recall_curve(c, classes, th), want, rtol=1e-14)


def test_top_distinct_picks_the_largest_distinct_entries():
    classes = syn_medium(2, 1)
    rng = np.random.default_rng(3)
    c = rng.uniform(size=(classes.K, classes.M))
    c[:, ~classes.distinct.any(0)] = 10.0          # common and query tokens are never picked
    sets = top_distinct(c, classes, 3)
    for n in range(classes.K):
        ids = np.flatnonzero(classes.distinct[n])
        assert sets[n] == frozenset(ids[np.argsort(c[n, ids])[-3:]].tolist())
    with pytest.raises(ValueError, match="^k:"):
        top_distinct(c, classes, 11)
    with pytest.raises(ValueError, match="^c:"):
        top_distinct(c[:1], classes, 3)


def test_draw_batches_replays_the_batches_of_a_seeded_run():
    torch = pytest.importorskip("torch")
    from verify.models.scan_snap_synthetic import draw_batches, train_reparam

    classes = syn_medium(1)
    for init in ("random", "zero"):
        kw = dict(eta_Y=2.0, eta_Z=1.0, steps=4, batch=8, T=16, init=init)
        a = train_reparam(classes, generator=torch.Generator().manual_seed(7), **kw)
        b = train_reparam(classes, generator=torch.Generator().manual_seed(7),
                          batches=draw_batches(classes, 7, steps=4, batch=8, T=16, init=init), **kw)
        np.testing.assert_array_equal(a["Z"], b["Z"])
        np.testing.assert_array_equal(a["loss"], b["loss"])
    with pytest.raises(ValueError, match="^batches:"):
        train_reparam(classes, eta_Y=1.0, eta_Z=1.0, steps=4, batches=draw_batches(classes, 7, steps=3))


def test_side_by_side_runs_are_the_separate_runs():
    torch = pytest.importorskip("torch")
    from verify.models.scan_snap_synthetic import draw_batches, train_reparam, train_reparam_side_by_side

    classes = syn_medium(2, 1)
    rates = [(1.0, 0.5), (3.0, 1.0), (0.5, 2.0)]
    for opt, init in (("sgd", "random"), ("adam", "zero")):
        batches = draw_batches(classes, 5, steps=6, batch=8, T=16, init=init)
        runs = train_reparam_side_by_side(classes, rates, steps=6, optimizer=opt, init=init,
                                          generator=torch.Generator().manual_seed(5), batches=batches)
        for (eY, eZ), b in zip(rates, runs):
            a = train_reparam(classes, eta_Y=eY, eta_Z=eZ, steps=6, optimizer=opt, init=init,
                              generator=torch.Generator().manual_seed(5), batches=batches)
            np.testing.assert_array_equal(a["Z"], b["Z"])       # the same arithmetic, run by run
            np.testing.assert_array_equal(a["Y"], b["Y"])
            np.testing.assert_array_equal(a["c"][[0, -1]], b["c"])
            np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-13)
    # one optimiser per run: both optimisers' runs in one pass, each still the separate run
    batches = draw_batches(classes, 5, steps=6, batch=8, T=16, init="zero")
    kinds = ["sgd", "adam", "adam", "sgd", "adam", "sgd"]
    mixed = train_reparam_side_by_side(classes, rates * 2, steps=6, optimizer=kinds, init="zero",
                                       generator=torch.Generator().manual_seed(5), batches=batches)
    for (eY, eZ), opt, b in zip(rates * 2, kinds, mixed):
        a = train_reparam(classes, eta_Y=eY, eta_Z=eZ, steps=6, optimizer=opt, init="zero",
                          generator=torch.Generator().manual_seed(5), batches=batches)
        np.testing.assert_array_equal(a["Z"], b["Z"])
        np.testing.assert_array_equal(a["Y"], b["Y"])
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-13)
    with pytest.raises(ValueError, match="^batches:"):
        train_reparam_side_by_side(classes, rates, steps=4, batches=batches)
    with pytest.raises(ValueError, match="^optimizer:"):
        train_reparam_side_by_side(classes, rates, steps=6, optimizer="rmsprop", batches=batches)
    with pytest.raises(ValueError, match="^optimizer:"):
        train_reparam_side_by_side(classes, rates, steps=6, optimizer=["sgd", "adam"], batches=batches)
