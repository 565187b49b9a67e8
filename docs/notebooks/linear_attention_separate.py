# ---
# jupyter:
#   jupytext:
#     formats: py:percent
# ---

# %% [markdown]
# # Separate key/query linear attention: saddles, drops and the scalar ODE
#
# Zhang, Singh, Latham & Saxe, *Training Dynamics of In-Context Learning in Linear
# Attention* (ICML 2025), §4–5 and Appendices E–F.
#
# With separate rank-one keys and queries, head $i$ contributes $v_i\,k_i q_i^\top$ to the
# effective matrix, and the prediction is again $\hat y_q = \beta^\top M x_q$ with
#
# $$M = \sum_{i=1}^H v_i\,k_i q_i^\top \qquad\text{(eq. 12)},$$
#
# so the loss is the merged model's $\mathcal L(M)$ and $G = -\tfrac12\partial\mathcal L/\partial M
# = \Lambda^2 - \mathbb E[\hat\Lambda^2] M\Lambda$ is the same matrix. Only the flow differs
# (eqs. 14, 83): $\tau\dot v_i = k_i^\top G q_i$, $\tau\dot k_i = v_i G q_i$,
# $\tau\dot q_i = v_i G^\top k_i$. The paper's claims for this model:
#
# * there are $2^D$ fixed points in function space, one per subset $S$ of eigen-directions
#   (eqs. 16–18), with loss eq. 63; the ordered ones $S = \{1..m\}$ are the saddles
#   $M_m$ of eq. 19;
# * from a small start the loss goes down a **staircase**: $D$ plateaus, the $m$-th drop
#   "approximately $\lambda_m$" (§4.3);
# * along the aligned ansatz $k = q = v\,e_m$ each head obeys the scalar ODE eq. 21, solved
#   implicitly by eq. 70, and escapes its plateau after $\approx\tau/(\lambda_m^2 w_\text{init})$
#   (eqs. 71, 76).
#
# As in the merged notebook, every formula is derived with the toolkit and compared
# symbolically with the printed one; every statement below is an `assert`.

# %%
import time

import numpy as np
import sympy as sp

import theory
from theory.compare import is_zero
from theory.linear_attention import separate
from theory.linear_attention import sym


from _helpers import claim, record, show  # noqa: E402  (shared notebook helpers)
import matplotlib.pyplot as plt  # noqa: E402

T_START = time.perf_counter()


# %% [markdown]
# ## 1. The $2^D$ fixed points, one eigen-direction at a time (eqs. 16–18, 59–60)
#
# Every function of $\Lambda$ in the problem ($\Lambda^2$, $\mathbb E[\hat\Lambda^2]$) shares
# the eigenvectors $e_d$ of $\Lambda$, so try $M = P_S f(\Lambda)$ with $P_S$ the projector
# onto $\{e_d : d\in S\}$. Under the spectral map ($\Lambda\to\lambda$, $P_S\to p\in\{0,1\}$)
# the gradient at $M_S = P_S M^*$ becomes a scalar per direction:

# %%
lam, p = sym("lam"), sp.Symbol("p", nonnegative=True)
img = separate.fixed_point_gradient_image()
show("spectral image of G(P_S M*)", img, r"G(P_S M^*)\big|_{e_d}")
claim("G(M_S) e_d = lambda^2 (1 - p) e_d: zero on the learned directions (p = 1)",
      is_zero(img - lam**2 * (1 - p)))
print("active root m_d (merged eq. 11 per direction):", separate.active_root())

# %% [markdown]
# On an unlearned direction ($p = 0$) the gradient is $\lambda_d^2 \neq 0$, but the flow of
# $(v, k, q)$ does not move there: with every head orthogonal to $e_d$ all three right-hand
# sides of eq. 14 vanish along $e_d$ (the weights enter multiplicatively). So each of the
# $2^D$ subsets is a fixed point of the weight flow; only $S = \{1..D\}$ (the merged global
# minimum) is a minimum. The registered $M_S$ equals the printed eq. 18:

# %%
cf_fp = record("linear_attention.separate.fixed_point_matrix")
show("M_S", cf_fp.expr)
claim("derived M_S equals eq. 18 / 59", cf_fp.equal(cf_fp.expr, cf_fp.printed_expr))

import itertools  # noqa: E402

from verify.tasks.in_context_regression import random_covariance  # noqa: E402

rng = np.random.default_rng(2025)
fig1 = np.array([0.4, 0.3, 0.2, 0.1])
Lam4 = random_covariance(rng, fig1)
N31 = 31
V4 = separate.eigenvectors_descending(Lam4)
grad = theory.get("linear_attention.merged.gradient")
worst = 0.0
for k_ in range(5):
    for S in itertools.combinations(range(1, 5), k_):
        M_S = cf_fp(Lambda=Lam4, N=N31, S=list(S))
        G = grad(Lambda=Lam4, N=N31, M=M_S)
        for d in S:
            worst = max(worst, np.linalg.norm(G @ V4[:, d - 1]), np.linalg.norm(V4[:, d - 1] @ G))
claim(f"all 16 subsets, rotated Fig.-1 spectrum, N = 31: max |G e_d| over d in S = {worst:.1e}",
      worst < 1e-13)

# %% [markdown]
# ## 2. The loss at a fixed point: eq. 63, and the saddles eq. 19
#
# Substituting $M = P_S M^*$ into the derived $\mathcal L(M)$ and using $P_S^2 = P_S$ gives a
# trace affine in $P_S$:

# %%
cf_sub = record("linear_attention.separate.subset_loss")
cf_sad = record("linear_attention.separate.saddle_loss")
show("L(M_S)", cf_sub.expr, r"\mathcal L(M_S)")
claim("derived L(M_S) equals eq. 63", cf_sub.equal(cf_sub.expr, cf_sub.printed_expr))
claim("at S = {1..m} it equals eq. 19", cf_sad.equal(cf_sad.expr, cf_sad.printed_expr))
levels = np.array([cf_sad(Lambda=Lam4, N=N31, m=m) for m in range(5)])
print("L(M_0..M_4), Fig.-1 spectrum, N = 31:", np.round(levels, 6))
claim("matches the independent hand values (1, 0.640580, 0.377372, 0.209805, 0.135995)",
      np.allclose(levels, [1, 0.640580, 0.377372, 0.209805, 0.135995], atol=5e-7))
L_star = theory.get("linear_attention.merged.global_min_loss")(Lambda=Lam4, N=N31)
claim(f"the last saddle is the merged global minimum (relative difference "
      f"{abs(levels[-1] / L_star - 1):.1e})", abs(levels[-1] - L_star) <= 1e-12 * abs(L_star))

# %% [markdown]
# ### Erratum: the size of a drop
#
# §4.3 says the $m$-th drop is approximately $\lambda_m$. From eq. 19 it is exactly
#
# $$\mathcal L(M_{m-1}) - \mathcal L(M_m) = \frac{\lambda_m^3}{a_m}
#   = \lambda_m\Big(1 + \frac{1 + \operatorname{tr}\Lambda/\lambda_m}{N}\Big)^{-1},$$
#
# whose $N\to\infty$ limit is $\lambda_m$. At $N = 31$ the difference is 10 %:

# %%
cf_drop = record("linear_attention.separate.drop_size")
show("drop_m", cf_drop.expr)
claim("the derived drop is NOT the printed lambda_m", not cf_drop.equal(cf_drop.expr, cf_drop.printed_expr))
a_eig = theory.get("linear_attention.data.lambda_hat_sq_eigenvalue")(lam=fig1, trLambda=fig1.sum(), N=N31)
drops = np.array([cf_drop(Lambda=Lam4, N=N31, m=m) for m in range(1, 5)])
printed = np.array([cf_drop(Lambda=Lam4, N=N31, m=m, printed=True) for m in range(1, 5)])
print("exact drops   :", np.round(drops, 5))
print("printed drops :", np.round(printed, 5))
claim("exact drops are lambda^3/a: (0.35942, 0.26321, 0.16757, 0.07381)",
      np.allclose(drops, fig1**3 / a_eig, rtol=1e-12)
      and np.allclose(drops, [0.35942, 0.26321, 0.16757, 0.07381], atol=5e-6))
claim("the printed drops are the eigenvalues (0.4, 0.3, 0.2, 0.1)", np.allclose(printed, fig1, rtol=1e-12))
drop_gap = abs(drops.sum() - (levels[0] - levels[-1]))
claim(f"the exact drops add up to L(M_0) - L(M_4) (difference {drop_gap:.1e})", drop_gap <= 1e-12 * levels[0])
claim("and the printed ones do not (they add up to tr Lambda)", abs(printed.sum() - (levels[0] - levels[-1])) > 0.1)
print("erratum:", cf_drop.erratum)

# %% [markdown]
# ## 3. The scalar ODE (eq. 21) from the ansatz
#
# Put one head on one eigenvector, $k = q = v\,e_m$. Then $M$ gains $v^3 e_m e_m^\top$, the
# spectral image of $G$ along $e_m$ is $\lambda^2 - a\lambda v^3$ (with $a = a_m$ the
# eigenvalue of $\mathbb E[\hat\Lambda^2]$, eq. 32), and $\tau\dot v = k^\top G q$ gives

# %%
cf_rhs = record("linear_attention.separate.scalar_ode_rhs")
show("dv/dt", cf_rhs.expr, r"\dot v")
claim("derived equals eq. 21: tau dv/dt = lambda^2 v^2 - lambda a v^5", cf_rhs.equal(cf_rhs.expr, cf_rhs.printed_expr))

# %% [markdown]
# The same statement on the exact flow: at a balanced, aligned state (heads on distinct
# eigenvectors) the value-weight derivatives of eq. 14 equal the scalar ODE head by head.

# %%
import verify.flows.separate as fs  # noqa: E402

v_test = np.array([0.3, 0.7, 1.1, 0.05])
v_al, k_al, q_al = fs.init_aligned_separate(Lam4, 4, 1, v_test)
dv, _, _ = fs.gradients(Lam4, N31, v_al, k_al, q_al)
dv_21 = cf_rhs(v=v_test, lam=fig1, a=a_eig, tau=1.0)
claim(f"aligned state: max |dv_flow - eq. 21| = {np.max(np.abs(dv - dv_21)):.1e}",
      np.allclose(dv, dv_21, rtol=1e-12, atol=1e-15))
v_star = (fig1 / a_eig) ** (1 / 3)
# at v* the two terms of eq. 21 cancel: compare the remainder with their size
rest_star = np.max(np.abs(cf_rhs(v=v_star, lam=fig1, a=a_eig, tau=1.0)))
claim(f"its nonzero fixed point v* = (lambda/a)^(1/3) (eq. 20a): |dv/dt| = {rest_star:.1e}",
      rest_star <= 1e-13 * np.max(fig1**2 * v_star**2))

# %% [markdown]
# ## 4. The implicit solution (eq. 70), and a slip in its integrand
#
# Separating variables, $t = \frac{\tau}{\lambda^2}\int_{v_0}^{v}\frac{du}{u^2 - (a/\lambda)u^5}$;
# `sympy.integrate` gives the antiderivative. The paper prints the integrand with $u^2$
# where it should be $u^5$, but the antiderivative it gives is the right one:

# %%
cf_time = record("linear_attention.separate.scalar_ode_time")
claim("derived t(v) - t(v0) equals eq. 70's antiderivative", cf_time.equal(cf_time.expr, cf_time.printed_expr))
vv, v0, a_s, tau_s = sym("v"), sym("v0"), sym("a"), sym("tau")
dtdv = sp.diff(cf_time.printed_expr, vv)
right = tau_s / (lam**2 * vv**2 - lam * a_s * vv**5)
slip = tau_s / (lam**2 * vv**2 - lam * a_s * vv**2)
at = {vv: sp.Rational(1, 3), lam: sp.Rational(2, 5), a_s: sp.Rational(3, 10), tau_s: 1}
claim("d/dv of the printed antiderivative is tau/(lambda^2 v^2 - lambda a v^5)",
      is_zero(sp.simplify(dtdv - right)) or abs(float((dtdv - right).subs(at).evalf(30))) < 1e-25)
claim("and not the printed integrand with v^2", abs(float((dtdv - slip).subs(at).evalf(30))) > 1e-3)

# %% [markdown]
# ## 5. Escape time (eqs. 71, 76)
#
# While $v$ is small only the $v^2$ term matters: $\tau\dot v = \lambda_m^2 v^2$,
# $v(0) = w_\text{init}$ blows up at $t = \tau/(\lambda_m^2 w_\text{init})$ (`sympy.dsolve`):

# %%
cf_esc = record("linear_attention.separate.escape_time")
show("t_m", cf_esc.expr)
claim("derived blow-up time equals eqs. 71/76", cf_esc.equal(cf_esc.expr, cf_esc.printed_expr))
for w in (1e-2, 1e-4, 1e-6):
    t_esc = cf_esc(Lambda=Lam4, N=N31, m=1, tau=1.0, w_init=w)
    t_half = cf_time(v=v_star[0] / 2, v0=w, lam=fig1[0], a=a_eig[0], tau=1.0)
    rel = abs(t_half / t_esc - 1)
    print(f"w_init = {w:.0e}: eq. 71 {t_esc:12.4f}, eq. 70 to v*/2 {t_half:12.4f}, relative gap {rel:.1e}")
    claim("the gap is O(w_init / v*): eq. 71 is the leading order", rel < 2 * w / v_star[0])

# %% [markdown]
# ## 6. The staircase on the exact flow
#
# $H = D = 4$ rank-one heads, rotated Fig.-1 spectrum, $N = 31$, $\tau = 1$, a random eq.-36
# start with $w_\text{init} = 0.03$. The flow is integrated with DOP853 at `rtol = 1e-9`.
# Dashed lines: the saddle losses $\mathcal L(M_m)$ of eq. 19. The measured plateau levels
# (the loss where it is flattest between two drops) must sit on them.

# %%
W_RAND = 3e-2
v_r, k_r, q_r = fs.init_separate(rng, 4, 1, 4, W_RAND)
t_st = np.concatenate([[0.0], np.geomspace(1.0, 6e4, 2500)])
flow = fs.integrate(Lam4, N31, v_r, k_r, q_r, t_eval=t_st, rtol=1e-9, dense=True)
pl = fs.plateaus(t_st, flow.loss, levels, func=flow.loss_at)
gaps = -np.diff(levels)
dev = np.abs(pl.level_at_flattest - levels) / np.concatenate([gaps, gaps[-1:]])
print("drop times (half-way):", np.round(pl.drop_times, 1))
print("measured levels       :", np.round(pl.level_at_flattest, 6))
claim("four drops, in order", np.all(np.isfinite(pl.drop_times)) and np.all(np.diff(pl.drop_times) > 0))
claim(f"each plateau on its saddle: max |level - L(M_m)| / gap = {dev.max():.1e} (< 1e-3)", dev.max() < 1e-3)
rise = max(0.0, np.max(np.diff(flow.loss)))
claim(f"the loss never increases (gradient flow; largest rise {rise:.1e}, integration noise)",
      rise <= 1e-10 * levels[0])

# %% [markdown]
# ### Aligned start against the per-head scalar ODE
#
# From $k_i = q_i = w_\text{init} e_i$, $v_i = w_\text{init}$ every head follows its own copy
# of eq. 21 exactly. Read off $v_i(t)$ from the flow and map it back to a time with eq. 70;
# it must return $t$, to the integration error amplified by $dt/dv$. That factor blows up at
# both ends, so we compare on $w_\text{init}(1 + 10^{-3}) < v < (1 - 10^{-3})v^*$, and
# integrate at `rtol = 1e-12`. (At the default `rtol = 1e-10` the solver, taking long steps
# once a head has settled, leaves $v$ wobbling around $v^*$ by up to $10^{-5}$: a sample
# there read back through eq. 70 lands hundreds of time units off, by an amount that
# depends on the CPU's floating-point kernels.)

# %%
W_AL = 1e-2
v_a, k_a, q_a = fs.init_aligned_separate(Lam4, 4, 1, W_AL)
t_al = np.concatenate([[0.0], np.geomspace(1.0, 3e4, 1500)])
flow_al = fs.integrate(Lam4, N31, v_a, k_a, q_a, t_eval=t_al, rtol=1e-12)
worst = 0.0
for i in range(4):
    sel = (flow_al.v[:, i] > W_AL * (1 + 1e-3)) & (flow_al.v[:, i] < v_star[i] * (1 - 1e-3))
    t_70 = cf_time(v=flow_al.v[sel, i], v0=W_AL, lam=fig1[i], a=a_eig[i], tau=1.0)
    worst = max(worst, np.max(np.abs(t_70 / t_al[sel] - 1)))
claim(f"every head: max |t(eq. 70) / t - 1| = {worst:.1e} (< 1e-6)", worst < 1e-6)
claim("the heads settle at v* and the loss at L(M_4)",
      np.allclose(flow_al.v[-1], v_star, rtol=1e-9) and abs(flow_al.loss[-1] - levels[-1]) < 1e-10)
esc = np.array([cf_esc(Lambda=Lam4, N=N31, m=m, tau=1.0, w_init=W_AL) for m in range(1, 5)])
pl_al = fs.plateaus(t_al, flow_al.loss, levels)
print("drop times, aligned flow:", np.round(pl_al.drop_times, 1), " eq. 71:", np.round(esc, 1))
claim("aligned drops follow eq. 71 to within 5 %", np.all(np.abs(pl_al.drop_times / esc - 1) < 0.05))

fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
axes[0].semilogx(t_st[1:], flow.loss[1:], "-", label="exact flow, eq.-36 start")
axes[0].set_title(rf"random start, $w_\mathrm{{init}} = {W_RAND}$")
axes[1].semilogx(t_al[1:], flow_al.loss[1:], "-", label="exact flow, aligned start")
for ax in axes:
    for m, L in enumerate(levels):
        ax.axhline(L, color="grey", lw=0.8, ls="--")
        ax.text(1.1, L + 0.01, rf"$\mathcal{{L}}(M_{m})$", fontsize=7)
    ax.set_xlabel(r"$t/\tau$")
    ax.legend(loc="lower left", fontsize=8)
for t_e in esc:
    axes[1].axvline(t_e, color="C3", lw=0.6, ls=":")
axes[1].set_title(rf"aligned start, $w_\mathrm{{init}} = {W_AL}$ (dotted: eq. 71)")
axes[0].set_ylabel(r"population loss $\mathcal{L}(M)$")
fig.suptitle(r"$\Lambda$ eigenvalues $(0.4, 0.3, 0.2, 0.1)$, $N = 31$, $H = D = 4$, rank 1", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Errata in this part
#
# | where | printed | correct | evidence |
# |---|---|---|---|
# | §4.3 | the $m$-th drop is $\approx\lambda_m$ | $\lambda_m^3/a_m$ (0.35942, not 0.4, at $N = 31$) | §2 above; `linear_attention.separate.drop_size` |
# | eq. 70, integrand | $v^2 - (a/\lambda) v^2$ | $v^2 - (a/\lambda) v^5$ (the antiderivative is right) | §4 above |

# %%
print(f"notebook ran in {time.perf_counter() - T_START:.1f} s")
