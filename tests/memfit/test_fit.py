"""Memory fit: exact recovery, statistics against closed forms and brute force, every refusal and warning."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sappkit import (
    InputError, LayerTable, dryrun_config, expected_params, fit_memory, plan_dryruns, read_dryrun_csv, read_dryrun_yaml,
    read_layers_json, stage_memory, synthetic_dryruns,
)
from sappkit.columns import SAPP_OPTIONS

DATA = Path("data")
LLAMA = read_layers_json(DATA / "llama2_70b.json")
COUNTS = [f"n_{o}" for o in SAPP_OPTIONS]


def random_table(rng, kinds=("block",), options=SAPP_OPTIONS, const_mb=2500.0) -> pd.DataFrame:
    rows = [dict(kind="embed", role="head", count=1, param_mb=rng.uniform(200, 900), option="none",
                 forward_time=1, backward_time=2, activation_mb=rng.uniform(1, 30))]
    for kind in kinds:
        param = rng.uniform(100, 3000)
        for option in options:
            rows.append(dict(kind=kind, role="body", count=40, param_mb=param, option=option, forward_time=3,
                             backward_time=6, activation_mb=rng.uniform(5, 3000)))
    rows.append(dict(kind="head_out", role="tail", count=1, param_mb=rng.uniform(200, 900), option="none",
                     forward_time=2, backward_time=4, activation_mb=rng.uniform(1, 600)))
    frame = pd.DataFrame(rows)
    frame.attrs["const_mb"] = const_mb
    return frame


def as_table(frame):
    return LayerTable(frame, const_mb=frame.attrs["const_mb"])


def configs_of(observations: pd.DataFrame) -> pd.DataFrame:
    return observations.drop(columns="memory_mb")


def assert_recovers(fit, truth: pd.DataFrame, *, rtol=1e-9, atol=1e-6):
    got = fit.params.set_index("name")["value_mb"]
    want = truth.set_index("name")["value_mb"]
    if not fit.const_fitted:
        want = want.drop("const_mb")
    assert list(got.index) == list(want.index)
    np.testing.assert_allclose(got.to_numpy(), want.to_numpy(), rtol=rtol, atol=atol)


def refusal(call) -> str:
    with pytest.raises(InputError) as error:
        call()
    return str(error.value)


def test_synthetic_dryruns_refuses_bad_noise_seed_and_rounding():
    config = dryrun_config(stages=4, layers=80)
    assert refusal(lambda: synthetic_dryruns(LLAMA, config, noise_mb=-1)) == (
        "noise_mb must be a finite number >= 0; got -1")
    assert refusal(lambda: synthetic_dryruns(LLAMA, config, noise_mb=1, seed=-1)) == "seed must be an int >= 0; got -1"
    assert refusal(lambda: synthetic_dryruns(LLAMA, config, seed="x")) == "seed must be an int >= 0; got 'x'"
    assert refusal(lambda: synthetic_dryruns(LLAMA, config, round_mb=3)) == "round_mb must be a bool; got 3"


# --- exact recovery --------------------------------------------------------------------------------

def test_square_single_run_recovers_exactly(rng):
    table = as_table(random_table(rng, options=("none", "selective", "full")))
    plan = plan_dryruns(7, 42, ["none", "selective", "full"])
    fit = fit_memory(synthetic_dryruns(table, plan.configs))
    assert (fit.rank, len(fit.observations)) == (7, 7)
    assert_recovers(fit, expected_params(table, plan.configs))
    assert fit.params["stderr_mb"].isna().all() and np.isnan(fit.loo_error_mb)
    assert fit.condition_number == pytest.approx(plan.condition_number)


@pytest.mark.parametrize("name", ["llama2_70b", "deepseek_v3", "vlm"])
def test_overdetermined_bundled_configurations_recover_exactly(name):
    table = read_layers_json(DATA / f"{name}.json")
    configs = configs_of(read_dryrun_csv(DATA / f"{name}_dryruns.csv"))
    fit = fit_memory(synthetic_dryruns(table, configs))
    assert_recovers(fit, expected_params(table, configs), rtol=1e-8)
    assert fit.warnings == () and fit.loo_error_mb < 1e-6


@pytest.mark.parametrize("less_memory", [False, True])
def test_interleaved_with_capped_micro_batches_recovers_exactly(rng, less_memory):
    table = as_table(random_table(rng))
    runs = []
    for r in range(2):
        held = rng.integers(1, 5, (2, 6))
        held[0, 0] = held[1, 5] = 1 + r  # vary the head's and tail's cells between runs too
        total = int(held.sum())
        base = total // 12
        full = [[int(rng.integers(0, n + 1)) for n in row] for row in held]
        select = [[int(rng.integers(0, n + 1)) for n in row] for row in held]
        comm = [[int(rng.integers(0, n + 1)) for n in row] for row in held]
        offset = (held - base).tolist()
        runs.append(dryrun_config(stages=6, layers=total, chunks=2, offset=offset, recompute=full,
                                  select_recompute=select, select_comm_recompute=comm, run=f"r{r}"))
    configs = pd.concat(runs, ignore_index=True).assign(micro_batches=8)  # caps chunk 0's 2p - 1 = 11 at 8
    observed = synthetic_dryruns(table, configs, schedule="interleaved", less_memory=less_memory)
    fit = fit_memory(observed, schedule="interleaved", less_memory=less_memory)
    assert_recovers(fit, expected_params(table, configs, schedule="interleaved", less_memory=less_memory),
                    rtol=1e-7)
    if not less_memory:
        with pytest.raises(InputError):
            fit_memory(observed)  # 1F1B has no chunks


def test_rounds_that_identify_nothing_alone_identify_everything_pooled(rng):
    table = as_table(random_table(rng, options=("none", "full")))
    rounds = [dryrun_config(stages=4, layers=80, offset=off, recompute=rec, run=f"round{i + 1}")
              for i, (off, rec) in enumerate([([0, 1, -1, 0], [1, 2, 1, 1]), ([0, -1, 1, 0], [1, 3, 4, 1]),
                                              ([2, -2, 1, -1], [0, 5, 2, 9])])]
    configs = pd.concat(rounds, ignore_index=True)
    observed = synthetic_dryruns(table, configs)
    assert refusal(lambda: fit_memory(observed[observed["run"] == "round1"], const=True)) == (
        "fit_memory needs at least 6 observed stages to fit 6 parameters (const_mb, head_mb, tail_mb, param_mb, "
        "activation_mb[none], activation_mb[full]); got 4; add dry-run stages (sappkit.plan_dryruns proposes a set "
        "that identifies every parameter)")
    assert_recovers(fit_memory(observed, const=True), expected_params(table, configs))


def test_several_body_kinds_recover_exactly_and_keep_model_order(rng):
    table = as_table(random_table(rng, kinds=("vit", "lm"), options=("none", "full")))
    total = 80
    runs = []
    for r, held in enumerate(([6, 8, 12, 10, 9, 11, 12, 12], [9, 12, 8, 11, 10, 12, 8, 10],
                              [12, 7, 9, 10, 12, 9, 11, 10])):
        full = [int(rng.integers(0, n + 1)) for n in held]
        runs.append(dryrun_config(stages=8, layers=total, offset=[n - 10 for n in held], recompute=full,
                                  kinds={"vit": 40, "lm": 40}, run=f"r{r}"))
    configs = pd.concat(runs, ignore_index=True)
    fit = fit_memory(synthetic_dryruns(table, configs))
    assert_recovers(fit, expected_params(table, configs), rtol=1e-8)
    assert fit.params["name"].tolist()[3:] == ["param_mb[vit]", "activation_mb[vit:none]", "activation_mb[vit:full]",
                                               "param_mb[lm]", "activation_mb[lm:none]", "activation_mb[lm:full]"]


# --- the forward model against the pipeline model ---------------------------------------------------

@pytest.mark.parametrize("schedule, chunks, kinds", [("1f1b", 1, None), ("interleaved", 2, None),
                                                     ("1f1b", 1, {"dense_decoder": 3, "moe_decoder": 58})])
def test_synthetic_peaks_equal_stage_memory(schedule, chunks, kinds):
    table = read_layers_json(DATA / ("deepseek_v3.json" if kinds else "llama2_70b.json"))
    total = 61 if kinds else 80
    p = 4
    base = total // (p * chunks)
    extra = total - base * p * chunks
    offset = [1, -1, 0, extra] if chunks == 1 else [[1, -1, 0, extra], [0, 2, -2, 0]]
    recompute = [2, 0, 3, 1] if chunks == 1 else [[2, 0, 3, 1], [0, 1, 1, 2]]
    config = dryrun_config(stages=p, layers=total, chunks=chunks, offset=offset, recompute=recompute,
                           select_recompute=recompute, kinds=kinds).assign(micro_batches=6)
    peaks = synthetic_dryruns(table, config, schedule=schedule).drop_duplicates("stage")["memory_mb"]
    kind = config["kind"] if kinds else "decoder"
    assignment = pd.DataFrame({"kind": kind, "chunk": config["chunk"] if chunks > 1 else 0,
                               "stage": config["stage"], "layers": config[COUNTS].to_numpy().tolist()})
    long = [dict(kind=r.kind, chunk=r.chunk, stage=r.stage, option=o, layers=n)
            for r in assignment.itertuples() for o, n in zip(SAPP_OPTIONS, r.layers) if n]
    # The memory fit's model (SAPP's) has no working set term: the pipeline model without it.
    want = stage_memory(table, pd.DataFrame(long), stages=p, micro_batches=6, chunks=chunks, schedule=schedule,
                        working_set=False)
    np.testing.assert_allclose(peaks.to_numpy(), want["memory_mb"].to_numpy(), rtol=1e-12)


# --- against SAPP's memory fit, and the statistics against closed forms and brute force ---------

def test_one_run_equals_sapps_two_step_solve(rng):
    table = as_table(random_table(rng, options=("none", "selective", "full")))
    plan = plan_dryruns(12, 60, ["none", "selective", "full"])
    observed = synthetic_dryruns(table, plan.configs, noise_mb=80, seed=5)
    fit = fit_memory(observed)
    # SAPP's memory fit: least squares over the middle stages for const, param and activations, then head and
    # tail as the residual of stage 0 and p - 1 (which include the constant).
    p, s = 12, observed["stage"].to_numpy()
    n = observed[["n_none", "n_selective", "n_full"]].to_numpy()
    rows = np.column_stack([np.ones(p), observed["layers"], n * (p - s)[:, None]])
    middle = (s > 0) & (s < p - 1)
    const, param, *acts = np.linalg.lstsq(rows[middle], observed["memory_mb"].to_numpy()[middle], rcond=None)[0]
    body = rows[:, 1:] @ np.array([param, *acts])
    head, tail = (observed["memory_mb"].to_numpy() - body)[[0, p - 1]]
    np.testing.assert_allclose(fit.params["value_mb"].to_numpy(), [const, head - const, tail - const, param, *acts],
                               rtol=1e-9)
    assert fit.head_tail()["including_const_mb"].tolist() == pytest.approx([head, tail], rel=1e-9)


def test_stderr_and_leave_one_out_match_closed_form_and_refitting():
    observed = read_dryrun_csv(DATA / "llama2_70b_dryruns.csv")
    fit = fit_memory(observed)
    stages = observed.drop_duplicates(["run", "stage"])
    x = np.column_stack([np.ones(len(stages)), stages["stage"] == 0, stages["stage"] == 15, stages["layers"],
                         stages[COUNTS].to_numpy() * (16 - stages["stage"].to_numpy())[:, None]])
    y = stages["memory_mb"].to_numpy()
    beta = np.linalg.solve(x.T @ x, x.T @ y)
    residual = y - x @ beta
    covariance = residual @ residual / (len(y) - x.shape[1]) * np.linalg.inv(x.T @ x)
    np.testing.assert_allclose(fit.params["value_mb"], beta, rtol=1e-8)
    np.testing.assert_allclose(fit.params["stderr_mb"], np.sqrt(np.diag(covariance)), rtol=1e-6)
    loo = []
    for run, stage in zip(stages["run"], stages["stage"]):
        left = observed[(observed["run"] != run) | (observed["stage"] != stage)]
        try:
            refit = fit_memory(left)
        except InputError:
            loo.append(np.nan)  # that stage alone determines a parameter: not defined
            continue
        held = observed[(observed["run"] == run) & (observed["stage"] == stage)]
        predicted = refit.predict(held.drop(columns="memory_mb"))["predicted_mb"].iloc[0]
        loo.append(float(held["memory_mb"].iloc[0] - predicted))
    got = fit.observations.drop_duplicates(["run", "stage"])["loo_residual_mb"].to_numpy()
    np.testing.assert_allclose(got, loo, rtol=1e-6)
    assert fit.loo_error_mb == pytest.approx(np.sqrt(np.nanmean(np.square(loo))))


def test_stderr_covers_the_truth_at_its_rate():
    configs = configs_of(read_dryrun_csv(DATA / "llama2_70b_dryruns.csv"))
    truth = expected_params(LLAMA, configs)["value_mb"].to_numpy()
    exact = synthetic_dryruns(LLAMA, configs)
    stage_of = exact.groupby(["run", "stage"], sort=False).ngroup().to_numpy()
    repeats = 100
    covered, errors = np.zeros(len(truth)), []
    for seed in range(repeats):
        noise = np.random.default_rng(seed).normal(0.0, 50.0, stage_of.max() + 1)[stage_of]
        fit = fit_memory(exact.assign(memory_mb=exact["memory_mb"] + noise))
        error = fit.params["value_mb"].to_numpy() - truth
        covered += np.abs(error) <= 2 * fit.params["stderr_mb"].to_numpy()
        errors.append(error / fit.params["stderr_mb"].to_numpy())
    # 23 degrees of freedom: +-2 stderr covers 94.3%; 100 repeats leave a standard deviation of 2.3%.
    assert (covered / repeats >= 0.87).all(), covered / repeats
    assert np.abs(np.mean(errors, axis=0)).max() < 0.35  # unbiased: the mean error is within ~3.5 / sqrt(100)


def test_noisy_fit_stays_within_its_stated_error():
    observed = read_dryrun_csv(DATA / "vlm_dryruns.csv")
    fit = fit_memory(observed)
    truth = expected_params(read_layers_json(DATA / "vlm.json"), configs_of(observed))
    error = np.abs(fit.params["value_mb"].to_numpy() - truth["value_mb"].to_numpy())
    assert (error <= 4 * fit.params["stderr_mb"].to_numpy()).all()
    assert 10 < fit.loo_error_mb < 80  # the bundled noise is 30 MB, rounded to whole MB


# --- const ------------------------------------------------------------------------------------------

def test_const_auto_falls_back_and_says_so(rng):
    frame = random_table(rng, options=("none", "full"))
    frame.attrs["const_mb"] = 0.0
    table = as_table(frame)
    plan = plan_dryruns(5, 30, ["none", "full"], const=False)
    observed = synthetic_dryruns(table, plan.configs)
    fit = fit_memory(observed)
    assert not fit.const_fitted and fit.value("const_mb") == 0.0
    assert_recovers(fit, expected_params(table, plan.configs))
    assert fit.warnings == (
        "const_mb is not fitted: 5 observed stages cannot determine 6 parameters; the other parameters absorb the "
        "per-stage constant (fitting it needs stages other than the first and last holding different numbers of "
        "layers)",)
    assert refusal(lambda: fit_memory(observed, const=True)).startswith(
        "fit_memory needs at least 6 observed stages to fit 6 parameters (const_mb, head_mb,")


def test_const_needs_stages_of_different_sizes():
    config = dryrun_config(stages=8, layers=40, recompute=[0, 1, 2, 3, 4, 5, 1, 2], select_recompute=[
        1, 2, 4, 5, 5, 5, 3, 3])
    observed = synthetic_dryruns(LLAMA, config)
    assert refusal(lambda: fit_memory(observed, const=True)) == (
        "fit_memory cannot fit const_mb (const=True): every observed stage holds the same number of layers (5), "
        "so the constant cannot be told apart from param_mb; add a dry run whose stages hold different numbers of "
        "layers (a non-zero offset), or pass const=False")
    fit = fit_memory(observed)
    assert fit.warnings[0].startswith("const_mb is not fitted: every observed stage holds the same number of "
                                      "layers (5); the other parameters absorb")
    assert fit_memory(read_dryrun_csv(DATA / "llama2_70b_dryruns.csv"), const=False).params["name"][0] == "head_mb"


# --- refusals -----------------------------------------------------------------------------------------

def test_refusals_say_what_is_missing_and_which_dry_run_fixes_it():
    observed = read_dryrun_csv(DATA / "llama2_70b_dryruns.csv")
    three = observed[(observed[["n_comm", "n_both"]] == 0).all(axis=1)]
    assert refusal(lambda: fit_memory(three, options=["none", "selective", "comm", "full"])) == (
        "fit_memory cannot fit activation_mb for option 'comm': no observed stage runs a layer under it; add a dry "
        "run in which some stages run layers under 'comm' (select_comm_recompute)")
    assert refusal(lambda: fit_memory(three, options=["none", "full"])) == (
        "observations row 3 (run 'round1', stage 6) runs 7 layer(s) under 'selective', which is not in options "
        "('none', 'full'); leave those stages out or add 'selective' to options")
    assert refusal(lambda: fit_memory(observed[observed["stage"] > 0])) == (
        "fit_memory cannot fit head_mb (the embedding): no run observes stage 0; add stage 0's peak memory to a dry "
        "run")
    assert refusal(lambda: fit_memory(observed[observed["stage"] < 15])) == (
        "fit_memory cannot fit tail_mb (the LM head and loss): no run observes the last stage; add the last stage's "
        "peak memory to a dry run")
    few = observed[(observed["run"] == "round1") & observed["stage"].isin([0, 1, 2, 3, 4, 15])]
    assert refusal(lambda: fit_memory(few, const=False)) == (
        "fit_memory needs at least 8 observed stages to fit 8 parameters (head_mb, tail_mb, param_mb, "
        "activation_mb[none], activation_mb[selective], activation_mb[comm], activation_mb[both], "
        "activation_mb[full]); got 6; add dry-run stages (sappkit.plan_dryruns proposes a set that identifies every "
        "parameter)")


def test_a_rank_deficient_set_names_the_parameters_it_cannot_separate():
    # Every stage runs as many selective as full layers: their activations only ever appear summed.
    config = dryrun_config(stages=8, layers=48, offset=[0, 2, -2, 2, -2, 2, -2, 0], recompute=[1, 2, 1, 3, 0, 4, 2, 1],
                           select_recompute=[2, 4, 2, 6, 0, 8, 4, 2])
    observed = synthetic_dryruns(LLAMA, config)
    assert refusal(lambda: fit_memory(observed, const=False)) == (
        "fit_memory cannot identify activation_mb[selective], activation_mb[full] from these observations (rank 5 "
        "of 6): activation_mb[selective] needs stages holding different numbers of layers under 'selective' "
        "(select_recompute); activation_mb[full] needs stages holding different numbers of layers under 'full' "
        "(recompute); sappkit.plan_dryruns proposes dry runs that identify every parameter")


@pytest.mark.parametrize("kwargs, message", [
    (dict(schedule="dualpipev"), "schedule 'dualpipev' is not supported by fit_memory: DualPipeV puts head and tail "
                                 "both on stage 0, so dry-run peaks cannot tell them apart; fit a 1f1b dry run"),
    (dict(schedule="seqpipe"), "schedule 'seqpipe' is not supported by fit_memory: fit a dry run without sequence "
                               "splitting (schedule '1f1b' or 'interleaved')"),
    (dict(schedule="gpipe"), "schedule must be one of '1f1b', 'interleaved'; got 'gpipe'"),
    (dict(const="yes"), "const must be 'auto', True or False; got 'yes'"),
    (dict(const=1), "const must be 'auto', True or False; got 1"),
    (dict(less_memory="no"), "less_memory must be a bool; got 'no'"),
    (dict(tolerance=0), "tolerance must be a finite number > 0; got 0"),
    (dict(options="none"), "options must be a sequence of distinct option names; got 'none'"),
    (dict(options=True), "options must be a sequence of distinct option names; got True"),
    (dict(options=["none", ["full"]]), "options must be a sequence of distinct option names; got ['none', ['full']]"),
])
def test_argument_refusals(kwargs, message):
    observed = read_dryrun_csv(DATA / "llama2_70b_dryruns.csv")
    assert refusal(lambda: fit_memory(observed, **kwargs)) == message


def test_observations_must_be_a_frame_of_one_pipeline_shape():
    assert refusal(lambda: fit_memory([1, 2])) == "observations must be a DataFrame of dry-run observations; got list"
    configs = pd.concat([dryrun_config(stages=4, layers=40, offset=[1, -1, 2, -2], recompute=[0, 1, 2, 3], run="a"),
                         dryrun_config(stages=8, layers=40, offset=[1, -1] * 4, recompute=[0, 1] * 4, run="b")])
    assert refusal(lambda: fit_memory(synthetic_dryruns(LLAMA, configs))) == (
        "observations mix pipeline shapes (run 'a' has 4 stages, run 'b' has 8 stages): head_mb and tail_mb hold "
        "activations at the shape's micro-batches in flight, so fit the runs of one shape at a time")


# --- warnings in the result ------------------------------------------------------------------------------

def test_a_large_residual_warns_in_the_result():
    observed = read_dryrun_csv(DATA / "llama2_70b_dryruns.csv")
    bad = observed.copy()
    bad.loc[(bad["run"] == "round2") & (bad["stage"] == 7), "memory_mb"] = 41896
    fit = fit_memory(bad)
    residual = fit.observations.set_index(["run", "stage"]).loc[("round2", 7), "residual_mb"]
    assert fit.warnings[0] == (
        f"the largest residual is {residual:+,.1f} MB at run 'round2' stage 7 ({residual / 41896:.1%} of its 41,896 MB "
        "peak, above the 2% tolerance): the linear model does not explain these peaks well; check the configuration "
        "stated for that run")
    assert not any(w.startswith("the largest residual") for w in fit_memory(bad, tolerance=0.5).warnings)


def test_negative_and_ill_conditioned_fits_warn():
    fit = fit_memory(read_dryrun_csv(DATA / "deepseek_v3_dryruns.csv"))
    value = fit.value("activation_mb[dense_decoder:full]")
    assert fit.warnings == (f"activation_mb[dense_decoder:full] is fitted negative ({value:.1f} MB): memory cannot be "
                            "negative; the dry runs do not pin it down or their stated configuration is wrong",)
    # 2000 layers a stage, one more or fewer on two: the per-layer parameter and the constant barely differ.
    layers, full = [2000, 2001, 1999, 2000, 2000, 2000, 2000, 2000], [0, 1000, 0, 666, 3, 1000, 0, 500]
    config = pd.DataFrame(dict(run="run1", stage=range(8), stages=8, layers=layers,
                               n_none=np.subtract(layers, full), n_full=full))
    fit = fit_memory(synthetic_dryruns(LLAMA, config), const=True)
    assert fit.warnings == (f"the condition number {fit.condition_number:.3g} is high: small errors in the peaks "
                            "move the parameters a lot; add dry runs with more varied layer counts "
                            "(sappkit.plan_dryruns)",)


# --- using a fit ------------------------------------------------------------------------------------------

def test_predict_reproduces_the_forward_model_and_refuses_unfitted_options(rng):
    configs = configs_of(read_dryrun_csv(DATA / "llama2_70b_dryruns.csv"))
    fit = fit_memory(synthetic_dryruns(LLAMA, configs))
    other = dryrun_config(stages=16, layers=80, offset=[2, -2, 1, -1, 0, 0, 3, -3] * 2,
                          recompute=[3, 1, 0, 0, 2, 5, 0, 1] * 2, select_comm_recompute=[4, 1, 2, 0, 2, 5, 1, 1] * 2)
    np.testing.assert_allclose(fit.predict(other)["predicted_mb"], synthetic_dryruns(LLAMA, other)["memory_mb"],
                               rtol=1e-9)
    assert refusal(lambda: fit.predict(dryrun_config(stages=8, layers=80))) == (
        "configs run 'run1' has 8 stages but the fit's dry runs had 16 stages: head_mb and tail_mb hold activations "
        "at that pipeline shape, so predict that shape only (or build a layer table with to_layers)")
    narrow = fit_memory(synthetic_dryruns(LLAMA, dryrun_config(stages=16, layers=80, offset=[1, -1] * 8,
                                                               recompute=[0, 1, 2, 3, 4, 0, 1, 2] * 2)))
    assert refusal(lambda: narrow.predict(other)) == ("configs runs layers under 'comm', which the fit has no "
                                                      "activation_mb for (no dry run ran it)")
    assert refusal(lambda: narrow.value("param_mb[x]")) == (
        "name 'param_mb[x]' is not a fitted parameter; the fit has 'const_mb', 'head_mb', 'tail_mb', 'param_mb', "
        "'activation_mb[none]', 'activation_mb[full]'")


def test_to_layers_puts_the_fit_into_a_layer_table():
    configs = configs_of(read_dryrun_csv(DATA / "llama2_70b_dryruns.csv"))
    observed = synthetic_dryruns(LLAMA, configs)
    fit = fit_memory(observed)
    table = fit.to_layers(LLAMA)
    pd.testing.assert_frame_equal(table.frame.drop(columns=["param_mb", "activation_mb"]),
                                  LLAMA.frame.drop(columns=["param_mb", "activation_mb"]))
    body = table.frame[table.frame["role"] == "body"]
    np.testing.assert_allclose(body["activation_mb"], LLAMA.rows("decoder")["activation_mb"], rtol=1e-9)
    assert table.const_mb == pytest.approx(LLAMA.const_mb)
    assert table.head["param_mb"] == pytest.approx(fit.value("head_mb")) and table.head["activation_mb"] == 0
    # The table predicts exactly the observed peaks of its own pipeline shape.
    np.testing.assert_allclose(synthetic_dryruns(table, configs)["memory_mb"], observed["memory_mb"], rtol=1e-9)


def test_to_layers_from_bare_times_infers_the_layer_count():
    fit = fit_memory(read_dryrun_yaml(DATA / "llama2_70b_dryrun.yaml"))
    times = pd.DataFrame({"kind": ["embed", "block", "block", "block", "out"],
                          "option": ["none", "none", "selective", "full", "none"],
                          "forward_time": [1, 8, 8, 8, 2], "backward_time": [2, 16, 17, 24, 4]})
    table = fit.to_layers(times, head="embed", tail="out")
    assert table.count("block") == 80 and table.body_kinds == ("block",)
    assert table.options("block") == ("none", "selective", "full")


def test_to_layers_refusals():
    observed = read_dryrun_yaml(DATA / "llama2_70b_dryrun.yaml")
    fit = fit_memory(observed)
    assert refusal(lambda: fit.to_layers(LLAMA)) == (
        "times row 3 gives option 'comm' of kind 'decoder', which the fit has no activation_mb for; drop that row or "
        "add a dry run that runs it")
    three = LLAMA.frame[~LLAMA.frame["option"].isin(["comm", "both", "selective"])]
    assert refusal(lambda: fit.to_layers(three)) == (
        "times has no row for option 'selective' of kind 'decoder', which the fit has; add its forward_time and "
        "backward_time")
    assert refusal(lambda: fit.to_layers("times.csv")) == (
        "times must be a LayerTable or a DataFrame with columns kind, option, forward_time, backward_time; got str")
    bare = pd.DataFrame({"kind": ["block"], "option": ["none"], "forward_time": [1.0], "backward_time": [2.0]})
    assert refusal(lambda: fit.to_layers(bare.drop(columns=["option", "backward_time"]))) == (
        "times is missing column(s) 'option', 'backward_time'; a times frame needs kind, option, forward_time, "
        "backward_time")
    assert refusal(lambda: fit.to_layers(bare)) == (
        "times has no row for the head kind 'head'; add its forward_time and backward_time, or name it with head=")
    assert refusal(lambda: fit.to_layers(LLAMA.frame, kind="mlp")) == (
        "times must have exactly the fitted body kind 'mlp'; its body kinds are 'decoder'")
    partial = fit_memory(observed[observed["stage"] != 7])
    times = LLAMA.frame[LLAMA.frame["option"].isin(["none", "selective", "full"])].drop(columns="count")
    assert refusal(lambda: partial.to_layers(times)) == (
        "count is needed: times has no 'count' column and no run observed every stage, so the model's layer count "
        "is unknown; pass count=")
    assert partial.to_layers(times, count=80).count("decoder") == 80
    deepseek = fit_memory(read_dryrun_csv(DATA / "deepseek_v3_dryruns.csv"))
    assert refusal(lambda: deepseek.to_layers(read_layers_json(DATA / "deepseek_v3.json"))).startswith(
        "activation_mb[dense_decoder:full] is fitted negative (")


def test_head_tail_reports_both_conventions():
    fit = fit_memory(read_dryrun_csv(DATA / "llama2_70b_dryruns.csv"))
    frame = fit.head_tail()
    assert frame["role"].tolist() == ["head", "tail"]
    np.testing.assert_allclose(frame["including_const_mb"] - frame["excluding_const_mb"], fit.value("const_mb"))
    assert fit.describe().startswith("9 parameters from 32 observed stages in 2 run(s): rank 9, condition number ")


# --- drawings, the dashboard's callback and the command line ----------------------------------------------

def test_drawings_show_the_fit():
    from sappkit import plot_fit, plot_fit_params

    fit = fit_memory(read_dryrun_csv(DATA / "llama2_70b_dryruns.csv"))
    params, peaks, residuals = plot_fit(fit)
    assert [label.get_text() for label in params.get_yticklabels()] == fit.params["name"].tolist()
    assert [bar.get_width() for bar in params.patches] == pytest.approx(fit.params["value_mb"].tolist())
    stages = fit.observations.drop_duplicates(["run", "stage"])
    assert [bar.get_height() for bar in peaks.patches] == stages["memory_mb"].tolist()
    assert [bar.get_height() for bar in residuals.patches] == pytest.approx(stages["residual_mb"].tolist())
    assert refusal(lambda: plot_fit_params(fit.observations)) == (
        "params is missing column(s) 'name', 'value_mb'; a MemoryFit.params frame needs name, value_mb")
    assert refusal(lambda: plot_fit(fit.params)) == "fit must be a MemoryFit (sappkit.fit_memory); got DataFrame"


@pytest.mark.parametrize("dryruns", ["llama2_70b_dryruns.csv", "deepseek_v3_dryruns.csv", "vlm_dryruns.csv"])
def test_drawings_of_each_bundled_fit_cover_no_data(dryruns):
    """The legend of the observed peaks sat on the VLM's tallest bars and their predicted marks."""
    from sappkit import plot_fit

    from ..drawing import figure_overlaps

    figure = plot_fit(fit_memory(read_dryrun_csv(DATA / dryruns)))[0].figure
    assert figure_overlaps(figure) == []


def test_refit_leaves_out_stages_running_other_options_and_says_why():
    from sappkit.widgets.fit import refit

    observed = read_dryrun_csv(DATA / "llama2_70b_dryruns.csv")
    result = refit(observed, runs=["round1"], options=["none", "selective", "full"], const=False)
    assert result.fit is not None and result.fit.params["name"].tolist() == [
        "head_mb", "tail_mb", "param_mb", "activation_mb[none]", "activation_mb[selective]", "activation_mb[full]"]
    left = result.excluded
    assert set(left["run"]) == {"round1"} and all(r.startswith("runs ") for r in left["reason"])
    kept = observed[(observed["run"] == "round1") & ~observed["stage"].isin(left["stage"])]
    assert (kept[["n_comm", "n_both"]] == 0).all().all() and len(kept) + len(left) == 16
    assert result.summary().splitlines()[-1].startswith(f"left out ({len(left)} stage(s) running other options): "
                                                        "round1 stage ")
    assert refit(observed, runs=[]).message == "no stage selected: choose at least one run and stage"
    assert refit(observed, stages=[0, 15]).message.startswith("fit_memory needs at least 6 observed stages to fit 6")
    assert refit(observed, stages=[0], options=["selective"]).message == (
        "every selected stage runs an option outside ('selective',)")
    assert refit(observed, options=["selective"]).message.startswith("fit_memory cannot fit head_mb (the embedding)")


def test_the_dashboard_refits_when_a_control_changes():
    from sappkit.widgets.fit import FitDashboard

    dashboard = FitDashboard(read_dryrun_csv(DATA / "llama2_70b_dryruns.csv"))
    assert dashboard.last.fit.const_fitted
    dashboard.const.value = False
    assert not dashboard.last.fit.const_fitted
    dashboard.runs.value = ("round2",)
    assert set(dashboard.last.fit.observations["run"]) == {"round2"}


def test_command_line_fit(capsys, tmp_path):
    from sappkit.cli import main

    assert main(["fit", str(DATA / "llama2_70b_dryrun.yaml")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("7 parameters from 16 observed stages in 1 run(s)")
    assert out[-3:-2] == ["role  excluding_const_mb  including_const_mb"]
    assert main(["fit", str(DATA / "vlm_dryruns.csv"), "--no-const"]) == 0
    assert "const not fitted" in capsys.readouterr().out
    assert main(["fit", str(tmp_path / "peaks.txt")]) == 2
    assert capsys.readouterr().err == (f"sappkit fit: FILE must be a .yaml/.yml (MindFormers pipeline_balance) or "
                                       f".csv file of dry-run observations; got '{tmp_path / 'peaks.txt'}'\n")
