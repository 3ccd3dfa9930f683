# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Orthogonally decoupled inducing points (SOLVE-GP)
#
# Shi, Titsias & Mnih (2020), *Sparse orthogonal variational inference for Gaussian processes*
# (AISTATS), and Fernlund (2022, MSc thesis, ch. 5) split the GP into two independent parts
# with respect to a set of **regular** inducing variables $\mathbf u = f(Z_u)$:
#
# $$f = f_\parallel + f_\perp, \qquad f_\parallel(x) = \mathbf k_u(x)^\top K_{uu}^{-1}
# \mathbf u, \qquad f_\perp \sim \mathcal{GP}\big(0,\ c\big), \quad c(x, x') = k(x, x') -
# \mathbf k_u(x)^\top K_{uu}^{-1} \mathbf k_u(x').$$
#
# The residual $f_\perp$ is independent of $\mathbf u$. A second set of **orthogonal** inducing
# variables $\mathbf v_\perp = f_\perp(Z_v)$ summarises it, with prior covariance $C_{vv} =
# K_{vv} - K_{vu}K_{uu}^{-1}K_{uv}$ and covariance $C_{vf}$ with $f$. The variational family
# is $q(\mathbf u)\,q(\mathbf v_\perp)$: two small Gaussians instead of one big one.
#
# `gpflow_tight` has four models for it:
#
# * `SOLVEGPR`: collapsed, Gaussian likelihood, optimal $q$ in closed form (like `SGPR`);
# * `TightSOLVEGPR`: the same with the tighter conditional of Bui, Ashman & Turner (2025);
# * `SOLVEGP`: uncollapsed, any likelihood, minibatches (like `SVGP`);
# * `TightSOLVEGP`: its tighter version (Bui et al., eq. 14).
#
# The orthogonal set is an `OrthogonalInducingVariables(orthogonal, regular)`. GPflow's `Kuu`
# and `Kuf` dispatchers return $C_{vv}$ (plus jitter) and $C_{vf}$ for it, so to GPflow it is
# just another inducing variable of $f$.
#
# Two facts shape what follows (both derived in
# [docs/solve.md](../docs/solve.md#derivations); neither is in the thesis):
#
# * with the optimal $q$, the predictive **mean** is exactly that of `SGPR` on the union
#   $Z_u \cup Z_v$; only the variance differs;
# * the bound printed in Fernlund's thesis (eq. 5.33, `bound="thesis"`) is exactly `SGPR` on
#   the union. The true collapsed SOLVE-GP bound (`bound="solve"`, the default) is lower by a
#   gap $\Delta \ge 0$: the price of the mean-field split between $\mathbf u$ and
#   $\mathbf v_\perp$.

# %%

import gpflow
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf
from gpflow.ci_utils import reduce_in_tests

import gpflow_tight
from gpflow_tight.datasets import snelson_or_generated
from gpflow_tight.orthogonal import (
    decoupled_marginals,
    orthogonal_factors,
    orthogonal_projections,
)
from gpflow_tight.training import fit_adam, fit_scipy

gpflow.config.set_default_float(np.float64)
split = snelson_or_generated()
X, Y = split.X_train, split.Y_train
print(split.name, "| train", X.shape)

# %% [markdown]
# ## SOLVEGPR against SGPR on the union
#
# Eight evenly spaced starting locations, alternately assigned: four regular points $Z_u$ and
# four orthogonal points $Z_v$. `gpflow.models.SGPR` gets all eight as one set. Both start from
# the same SE kernel and noise variance 0.1, and L-BFGS trains the kernel, the noise and all
# inducing locations on each model's own bound.

# %%
Z_init = np.linspace(X.min(), X.max(), 8)[:, None]
Zu_init, Zv_init = Z_init[0::2].copy(), Z_init[1::2].copy()
MAXITER = reduce_in_tests(500)


def fit(model):
    fit_scipy(model, maxiter=MAXITER, progress=False)
    return model


solve = fit(
    gpflow_tight.SOLVEGPR(
        (X, Y),
        gpflow.kernels.SquaredExponential(),
        Zu_init.copy(),
        Zv_init.copy(),
        noise_variance=0.1,
    )
)
sgpr = fit(
    gpflow.models.SGPR(
        (X, Y), gpflow.kernels.SquaredExponential(), Z_init.copy(), noise_variance=0.1
    )
)
Zu = solve.inducing_variable.Z.numpy()
Zv = solve.orthogonal_inducing_variable.orthogonal.Z.numpy()

print(f"{'model':22s} {'bound':>9s} {'noise var':>9s} {'kern var':>9s} {'lengthsc':>9s}")
for name, model in [("SOLVEGPR (4 + 4)", solve), ("SGPR (8)", sgpr)]:
    print(
        f"{name:22s} {model.elbo().numpy():9.3f} {model.likelihood.variance.numpy():9.4f} "
        f"{model.kernel.variance.numpy():9.4f} {model.kernel.lengthscales.numpy():9.4f}"
    )

# %%
Xplot = np.linspace(X.min() - 1.0, X.max() + 1.0, 300)[:, None]
fig, axes = plt.subplots(1, 2, figsize=(13, 4), sharey=True)
panels = [
    ("SOLVEGPR: 4 regular + 4 orthogonal points", solve, Zu, Zv),
    ("SGPR on the union: 8 points", sgpr, sgpr.inducing_variable.Z.numpy(), None),
]
for ax, (title, model, Z_a, Z_b) in zip(axes, panels):
    mean, var = (t.numpy()[:, 0] for t in model.predict_f(Xplot))
    ax.plot(X, Y, "k.", ms=3, alpha=0.5, label="training data")
    ax.plot(Xplot, mean, "C0", lw=2, label="mean of f")
    ax.fill_between(Xplot[:, 0], mean - 2 * np.sqrt(var), mean + 2 * np.sqrt(var), alpha=0.25)
    level = Y.min() - 0.6
    if Z_b is None:
        ax.plot(Z_a, np.full(len(Z_a), level), "k^", ms=8, label="inducing points")
    else:
        ax.plot(Z_a, np.full(len(Z_a), level), "k^", ms=8, label="$Z_u$ (regular)")
        ax.plot(Z_b, np.full(len(Z_b), level), "s", color="C3", ms=7, label="$Z_v$ (orthogonal)")
    ax.set_title(title)
    ax.set_xlabel("x")
axes[0].set_ylabel("f (mean ± 2 sd)")
axes[0].legend(loc="upper left", fontsize=8)
fig.tight_layout()
plt.show()
plt.close(fig)

# %% [markdown]
# At its own fitted parameters, SOLVEGPR's mean is the mean `SGPR` would give with the same
# kernel, noise and the eight points $Z_u \cup Z_v$. The variances differ:

# %%
union = gpflow.models.SGPR(
    (X, Y), solve.kernel, np.vstack([Zu, Zv]), noise_variance=solve.likelihood.variance.numpy()
)
mean_solve, var_solve = (t.numpy()[:, 0] for t in solve.predict_f(Xplot))
mean_union, var_union = (t.numpy()[:, 0] for t in union.predict_f(Xplot))
print(f"max |mean difference|     {np.max(np.abs(mean_solve - mean_union)):.2e}")
print(f"max |variance difference| {np.max(np.abs(var_solve - var_union)):.2e}")
print(
    f"variance ratio SOLVEGPR / SGPR-union: {np.min(var_solve / var_union):.3f} to "
    f"{np.max(var_solve / var_union):.3f}"
)
np.testing.assert_allclose(mean_solve, mean_union, atol=1e-6)

# %% [markdown]
# ## The decoupled posterior: f = g + h + l
#
# In whitened coordinates, with $\mathbf a_u(x) = L_u^{-1}\mathbf k_u(x)$ and $\mathbf a_v(x) =
# L_v^{-1}\mathbf c_v(x)$ ($L_uL_u^\top = K_{uu}$, $L_vL_v^\top = C_{vv}$), the posterior is a
# sum of three independent processes:
#
# * $g$, carried by $\mathbf u$: mean $\mathbf a_u^\top\tilde{\mathbf m}_u$, variance
#   $\mathbf a_u^\top\tilde S_u\mathbf a_u$;
# * $h$, carried by $\mathbf v_\perp$: mean $\mathbf a_v^\top\tilde{\mathbf m}_v$, variance
#   $\mathbf a_v^\top\tilde S_v\mathbf a_v$;
# * $l$, the prior residual given both sets: mean 0, variance $k(x, x) - \|\mathbf a_u\|^2 -
#   \|\mathbf a_v\|^2$.
#
# `orthogonal_factors` builds $L_u$, $L_u^{-1}K_{uv}$ and $L_v$; `orthogonal_projections` gives
# $\mathbf a_u$ and $\mathbf a_v$; `whitened_optimal_q` returns the optimal
# $(\tilde{\mathbf m}_u, R_u, \tilde{\mathbf m}_v, R_v)$ with $\tilde S = RR^\top$; and
# `decoupled_marginals` adds them up. Calling it with one set's $q$ set to zero isolates the
# other set's part.

# %%
orthogonal = solve.orthogonal_inducing_variable
factors = orthogonal_factors(orthogonal, solve.kernel)
a_u, a_v = orthogonal_projections(orthogonal, solve.kernel, factors, Xplot)
m_u, R_u, m_v, R_v = solve.whitened_optimal_q(factors)
prior_var = solve.kernel(Xplot, full_cov=False)

mean_g, var_g, residual = decoupled_marginals(a_u, a_v, prior_var, m_u, R_u, 0.0 * m_v, 0.0 * R_v)
mean_h, var_h, _ = decoupled_marginals(a_u, a_v, prior_var, 0.0 * m_u, 0.0 * R_u, m_v, R_v)
mean_f, var_q, _ = decoupled_marginals(a_u, a_v, prior_var, m_u, R_u, m_v, R_v)
mean_g, mean_h, mean_f = (t.numpy()[:, 0] for t in (mean_g, mean_h, mean_f))
var_g, var_h, var_l = var_g.numpy()[:, 0], var_h.numpy()[:, 0], residual.numpy()
np.testing.assert_allclose(mean_g + mean_h, mean_solve, atol=1e-8)
np.testing.assert_allclose(var_g + var_h + var_l, var_solve, atol=1e-8)

fig, axes = plt.subplots(1, 2, figsize=(13, 4), sharex=True)
ax = axes[0]
ax.plot(X, Y, "k.", ms=3, alpha=0.3)
ax.plot(Xplot, mean_g, "C0", lw=2, label=r"$g$: $\mathbf{a}_u^\top\tilde{\mathbf{m}}_u$")
ax.plot(Xplot, mean_h, "C3", lw=2, label=r"$h$: $\mathbf{a}_v^\top\tilde{\mathbf{m}}_v$")
ax.plot(Xplot, mean_f, "k--", lw=1.5, label="sum = predictive mean")
ax.set_title("mean contributions")
ax = axes[1]
ax.stackplot(
    Xplot[:, 0],
    var_g,
    var_h,
    var_l,
    colors=["C0", "C3", "0.7"],
    alpha=0.6,
    labels=[
        r"$g$: $\mathbf{a}_u^\top\tilde S_u\mathbf{a}_u$",
        r"$h$: $\mathbf{a}_v^\top\tilde S_v\mathbf{a}_v$",
        r"$l$: $k - \|\mathbf{a}_u\|^2 - \|\mathbf{a}_v\|^2$",
    ],
)
ax.set_yscale("log")
ax.set_ylim(1e-4, 2 * solve.kernel.variance.numpy())
ax.set_title("variance terms (stacked, log scale)")
for ax in axes:
    level = ax.get_ylim()[0]
    ax.plot(Zu, np.full(len(Zu), level), "k^", ms=8, clip_on=False, label="$Z_u$")
    ax.plot(Zv, np.full(len(Zv), level), "s", color="C3", ms=7, clip_on=False, label="$Z_v$")
    ax.set_xlabel("x")
    ax.legend(loc="upper left", fontsize=8)
fig.tight_layout()
plt.show()
plt.close(fig)

# %% [markdown]
# $h$ is zero at every regular point: $\mathbf c_v(z) = 0$ for $z \in Z_u$, because $f_\perp$
# vanishes there. $g$ is a smooth curve through the four regular points and $h$ adds the
# detail between them. The residual variance of $l$ drops to (almost) zero at both sets of
# points, and grows away from them.
#
# ## The bounds
#
# At SOLVEGPR's fitted parameters (kernel, noise, $Z_u$, $Z_v$), every objective below is a
# lower bound on the same exact $\log p(\mathbf y)$ (GPR, bottom row). Expected (see
# [the derivations](../docs/solve.md#derivations)):
#
# $$\text{SGPR}(Z_u) \le \mathcal L_{\rm solve} = \mathcal L_{\rm thesis} - \Delta \le
# \mathcal L_{\rm thesis} = \text{SGPR}(Z_u \cup Z_v) \le \log p(\mathbf y),$$
#
# and each tighter (T-) bound is at least its standard one.

# %%
kernel, noise = solve.kernel, solve.likelihood.variance.numpy()


def solvegpr(model_class, bound, **kwargs):
    return (
        model_class((X, Y), kernel, Zu, Zv, bound=bound, noise_variance=noise, **kwargs)
        .elbo()
        .numpy()
    )


bounds = {
    "SGPR on Z_u only (4)": gpflow.models.SGPR((X, Y), kernel, Zu, noise_variance=noise)
    .elbo()
    .numpy(),
    "SOLVEGPR, bound=solve": solve.elbo().numpy(),
    "SOLVEGPR, bound=thesis": solvegpr(gpflow_tight.SOLVEGPR, "thesis"),
    "SGPR on the union (8)": union.elbo().numpy(),
    "TightSOLVEGPR, bound=solve": solvegpr(gpflow_tight.TightSOLVEGPR, "solve"),
    "TightSOLVEGPR, bound=thesis": solvegpr(gpflow_tight.TightSOLVEGPR, "thesis"),
    "exact GPR log p(y)": gpflow.models.GPR((X, Y), kernel, noise_variance=noise)
    .log_marginal_likelihood()
    .numpy(),
}
delta = solve.decoupling_kl().numpy()
for name, value in bounds.items():
    print(f"{name:28s} {value:10.4f}")
print(f"{'Δ = decoupling_kl()':28s} {delta:10.4f}")
gap = bounds["SOLVEGPR, bound=thesis"] - bounds["SOLVEGPR, bound=solve"]
print(f"{'thesis - solve':28s} {gap:10.4f}")

np.testing.assert_allclose(
    bounds["SOLVEGPR, bound=thesis"], bounds["SGPR on the union (8)"], rtol=1e-8
)
np.testing.assert_allclose(gap, delta, rtol=1e-6, atol=1e-8)
np.testing.assert_allclose(
    bounds["TightSOLVEGPR, bound=thesis"] - bounds["TightSOLVEGPR, bound=solve"],
    delta,
    rtol=1e-6,
    atol=1e-8,
)
assert delta >= 0
chain = ["SGPR on Z_u only (4)", "SOLVEGPR, bound=solve", "SOLVEGPR, bound=thesis"]
assert all(bounds[a] <= bounds[b] for a, b in zip(chain, chain[1:]))
assert bounds["SOLVEGPR, bound=thesis"] <= bounds["exact GPR log p(y)"]
assert bounds["TightSOLVEGPR, bound=solve"] >= bounds["SOLVEGPR, bound=solve"]
assert bounds["TightSOLVEGPR, bound=thesis"] >= bounds["SOLVEGPR, bound=thesis"]
assert bounds["TightSOLVEGPR, bound=thesis"] <= bounds["exact GPR log p(y)"]

# %% [markdown]
# ### Δ as the orthogonal set slides away
#
# As in the thesis's Fig. 6.2: two evenly spaced sets of $M$ points each span the data, start
# on top of each other, and $Z_v = Z_u + s$ is slid to the right while the kernel and noise
# stay at the fitted values. $\Delta$ is the KL divergence from the SOLVE-GP posterior process
# to SGPR's on the union. It vanishes when $K_{uf}C_{fv} = 0$: at perfect overlap
# ($\mathbf v_\perp \approx 0$, only jitter is left) and when $Z_v$ has left the data. In
# between, both sets explain the same data points and the mean-field split costs nats.
# Narrow dips appear where the shift is a multiple of the spacing, so that some orthogonal
# points land on regular ones again.

# %%
width = X.max() - X.min()
shifts = np.linspace(0.0, 2.0, reduce_in_tests(201, test_n=11)) * width
fig, ax = plt.subplots(figsize=(7, 4))
for M in (3, 5, 8):
    Zu_sweep = np.linspace(X.min(), X.max(), M)[:, None]
    sweep_model = gpflow_tight.SOLVEGPR(
        (X, Y), kernel, Zu_sweep, Zu_sweep.copy(), noise_variance=noise
    )
    Z_orthogonal = sweep_model.orthogonal_inducing_variable.orthogonal.Z
    decoupling_kl = tf.function(sweep_model.decoupling_kl)
    deltas = []
    for shift in shifts:
        Z_orthogonal.assign(Zu_sweep + shift)
        deltas.append(decoupling_kl().numpy())
    deltas = np.array(deltas)
    print(
        f"M = {M} per set: Δ at overlap {deltas[0]:.1e}, max {deltas.max():.3f} nats "
        f"(shift {shifts[deltas.argmax()] / width:.2f} widths), at 2 widths {deltas[-1]:.1e}"
    )
    positive = np.where(deltas > 0, deltas, np.nan)  # log axis: Δ underflows to 0 far away
    ax.plot(shifts / width, positive, "-", label=f"M = {M} per set")
ax.set_yscale("log")
ax.set_xlabel("shift of $Z_v$ / width of the data")
ax.set_ylabel(r"$\Delta$ = KL[SOLVE-GPR ‖ SGPR on the union] (nats)")
ax.legend()
fig.tight_layout()
plt.show()
plt.close(fig)

# %% [markdown]
# ## Uncollapsed: SOLVEGP and TightSOLVEGP
#
# `compute_qu()` and `compute_qv()` return the optimal $q(\mathbf u)$ and $q(\mathbf v_\perp)$
# in unwhitened coordinates, $(\mathbf m_u, S_u)$ and $(\mathbf m_v, S_v)$. Loaded into
# `SOLVEGP` with `whiten=False`, its ELBO is SOLVEGPR's `"solve"` bound (not the thesis bound: the
# uncollapsed family is the mean-field one). `TightSOLVEGP` with its default $\beta$ (the
# noise variance, where the relaxation $m_n = \beta / (d_n + \beta)$ is optimal) gives the
# `TightSOLVEGPR` bound.

# %%
q_u_mean, q_u_cov = (t.numpy() for t in solve.compute_qu())
q_v_mean, q_v_cov = (t.numpy() for t in solve.compute_qv())


def uncollapsed(model_class):
    return model_class(
        gpflow.kernels.SquaredExponential(
            variance=kernel.variance.numpy(), lengthscales=kernel.lengthscales.numpy()
        ),
        gpflow.likelihoods.Gaussian(noise),
        Zu.copy(),
        Zv.copy(),
        whiten=False,
        q_mu=q_u_mean,
        q_sqrt=np.linalg.cholesky(q_u_cov)[None],
        q_mu_orthogonal=q_v_mean,
        q_sqrt_orthogonal=np.linalg.cholesky(q_v_cov)[None],
        num_data=len(X),
    )


solvegp, tight_solvegp = uncollapsed(gpflow_tight.SOLVEGP), uncollapsed(gpflow_tight.TightSOLVEGP)
print(f"SOLVEGP ELBO at q*       {solvegp.elbo((X, Y)).numpy():10.4f}")
print(f"TightSOLVEGP ELBO at q*  {tight_solvegp.elbo((X, Y)).numpy():10.4f}")
np.testing.assert_allclose(solvegp.elbo((X, Y)).numpy(), bounds["SOLVEGPR, bound=solve"], rtol=1e-6)
np.testing.assert_allclose(
    tight_solvegp.elbo((X, Y)).numpy(), bounds["TightSOLVEGPR, bound=solve"], rtol=1e-6
)
np.testing.assert_allclose(solvegp.predict_f(Xplot)[0].numpy()[:, 0], mean_solve, atol=1e-6)

# %% [markdown]
# Minibatches work as for `SVGP`. A fresh `TightSOLVEGP` (whitened, $q$ at the prior) with
# the same kernel, noise and inducing inputs held fixed, and Adam on batches of 32 points
# training both $q$'s and $\beta$: its ELBO (on the full data) climbs towards the collapsed
# `TightSOLVEGPR` bound, which is its maximum over $q$ and $\beta$.

# %%
minibatch_model = gpflow_tight.TightSOLVEGP(
    gpflow.kernels.SquaredExponential(
        variance=kernel.variance.numpy(), lengthscales=kernel.lengthscales.numpy()
    ),
    gpflow.likelihoods.Gaussian(noise),
    Zu.copy(),
    Zv.copy(),
    num_data=len(X),
)
gpflow.utilities.set_trainable(minibatch_model.kernel, False)
gpflow.utilities.set_trainable(minibatch_model.likelihood, False)
gpflow.utilities.set_trainable(minibatch_model.inducing_variable, False)
gpflow.utilities.set_trainable(minibatch_model.orthogonal_inducing_variable, False)
before = minibatch_model.elbo((X, Y)).numpy()
fit_adam(
    minibatch_model,
    (X, Y),
    iterations=reduce_in_tests(1000),
    batch_size=32,
    learning_rate=0.05,
    progress=False,
)
print(
    f"TightSOLVEGP ELBO: {before:.2f} at the prior, "
    f"{minibatch_model.elbo((X, Y)).numpy():.2f} after Adam "
    f"(collapsed TightSOLVEGPR: {bounds['TightSOLVEGPR, bound=solve']:.2f})"
)

# %% [markdown]
# ## Inter-domain orthogonal features
#
# The orthogonal set may be any inducing variables with `Kuu`/`Kuf` and a cross-covariance
# `gpflow_tight.covariances.Kuv` with the regular set. Here it is four
# `FrequencyInducingFeatures` (Lázaro-Gredilla & Figueiras-Vidal, 2009): $v_m = \int f(x)\,
# \mathcal N(x; z_m, c_m)\cos(\varphi_m + \omega_m x)\,\mathrm dx$, a Gaussian window times a
# cosine, with closed-form covariances for the SE kernel. `SOLVEGPR` makes them orthogonal to
# $\mathbf u$ exactly as it did the points, $\mathbf v_\perp = \mathbf v - K_{vu}K_{uu}^{-1}
# \mathbf u$. The model is built and trained as before: the window centres, widths,
# frequencies and phases are trained with everything else.

# %%
features = gpflow_tight.FrequencyInducingFeatures(
    Zv_init.copy(),
    widths=np.full(Zv_init.shape, 0.3),
    frequencies=np.full(Zv_init.shape, 2.0),
    phases=np.zeros(len(Zv_init)),
)
solve_fif = fit(
    gpflow_tight.SOLVEGPR(
        (X, Y), gpflow.kernels.SquaredExponential(), Zu_init.copy(), features, noise_variance=0.1
    )
)
print(
    f"SOLVEGPR, 4 points + 4 frequency features: bound {solve_fif.elbo().numpy():.3f}, "
    f"Δ {solve_fif.decoupling_kl().numpy():.4f}"
)
print(
    f"SOLVEGPR, 4 points + 4 points:              bound {solve.elbo().numpy():.3f}, Δ {delta:.4f}"
)

# %%
mean, var = (t.numpy()[:, 0] for t in solve_fif.predict_f(Xplot))
centres, windows_sd = features.Z.numpy()[:, 0], features.widths.numpy()[:, 0]
omegas, phis = features.frequencies.numpy()[:, 0], features.phases.numpy()
fig, axes = plt.subplots(
    2, 1, figsize=(8, 5.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.2]}
)
ax = axes[0]
ax.plot(X, Y, "k.", ms=3, alpha=0.5, label="training data")
ax.plot(Xplot, mean, "C0", lw=2, label="mean of f")
ax.fill_between(Xplot[:, 0], mean - 2 * np.sqrt(var), mean + 2 * np.sqrt(var), alpha=0.25)
Zu_fif = solve_fif.inducing_variable.Z.numpy()
ax.plot(Zu_fif, np.full(len(Zu_fif), Y.min() - 0.6), "k^", ms=8, label="$Z_u$ (regular)")
ax.set_title("SOLVEGPR with frequency inducing features as the orthogonal set")
ax.legend(loc="upper left", fontsize=8)
ax = axes[1]
for m in range(len(centres)):
    window = np.exp(-0.5 * ((Xplot[:, 0] - centres[m]) / windows_sd[m]) ** 2) / (
        np.sqrt(2 * np.pi) * windows_sd[m]
    )
    ax.plot(Xplot, window * np.cos(phis[m] + omegas[m] * Xplot[:, 0]), color=f"C{m + 3}")
ax.set_ylabel("window $g_m(x)$")
ax.set_xlabel("x")
fig.tight_layout()
plt.show()
plt.close(fig)
