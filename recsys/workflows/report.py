"""The comparison as a report folder: report.md (figures embedded), results.json and PNG figures."""

import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

# Figure without pyplot: no global figure state and no display backend, so scripts, tests and
# notebooks all draw the same way.
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from recsys.errors import RecsysError, listed
from recsys.evaluation.biases import learned_biases
from recsys.evaluation.factors import cosine_neighbours, item_vectors, principal_components
from recsys.files import interruptions_held_back, read_file, write_json
from recsys.models.base import members_use_features, rating_model
from recsys.models.feature_coding import keeps_codings
from recsys.workflows.compare import (
    BASELINE_COLUMN,
    BASELINES,
    RANKING_BASELINES,
    Comparison,
    bias_correlations,
    extreme_items,
    item_table,
    models_with_biases,
    user_table,
)
from recsys.workflows.run_folder import LOCK_FILE, held_folder, taken_back_if_failed

# Every file write_report may write: an earlier report's own files, replaced by the next report.
REPORT_FILES = (
    "report.md",
    "results.json",
    "rmse.png",
    "learning_curves.png",
    "item_bias_extremes.png",
    "item_bias_scatter.png",
    "bias_distributions.png",
    "item_map.png",
    "ndcg_against_rmse.png",
    "fold_in.png",
)
# The ranking table's columns in the report (every metric at every k goes to results.json).
RANKING_COLUMNS = (
    "precision@10",
    "recall@10",
    "ndcg@10",
    "ndcg_graded@10",
    "map@10",
    "mrr@10",
    "hit_rate@10",
    "coverage@10",
    "popularity@10",
    "gini@10",
)


DRAFT_PREFIX = ".report-draft."  # the folder inside `out` a report is drawn in before it moves in


@contextmanager
def claim_report_folder(out: Path) -> Iterator[bool]:
    """Check before anything is trained that `out` can take a report: made if new, else empty or
    holding an earlier report (whose files write_report replaces; the user's own stay). Yields
    whether it holds one; any other folder is an error naming `out`, so no report overwrites other
    files. The folder is held while the block runs, so a second comparison into it is refused; a block
    that fails takes back the folder this made, as a failed run does its run folder."""
    with taken_back_if_failed(out, "`out`"):
        if not os.access(out, os.W_OK | os.X_OK):
            raise RecsysError(f"`out` {out}: cannot write in it")
        with held_folder(out, "`out`"):  # so a draft found here is no live comparison's
            for draft in out.glob(f"{DRAFT_PREFIX}*"):  # left by a run killed outright (SIGKILL) as it drew
                shutil.rmtree(draft, ignore_errors=True)
            names = {entry.name for entry in out.iterdir()} - {LOCK_FILE}
            earlier = "report.md" in names and comparison_results(out) is not None
            if names and not earlier:
                raise RecsysError(
                    f"`out` {out} already exists and holds no earlier report; choose a new or empty folder"
                )
            yield earlier


def earlier_data(out: Path) -> str | None:
    """What data the earlier report in `out` was of: its ratings file, else its dataset's name (None
    where its results cannot be read). Two own files of one name (two `ratings.csv`) share a default
    report folder, and one report must not silently replace the other's."""
    earlier = comparison_results(out)
    if earlier is None:
        return None
    shown = earlier.get("ratings_file") or earlier.get("dataset")
    return str(shown) if shown is not None else None


def comparison_results(out: Path) -> dict[str, Any] | None:
    """The results.json of an earlier comparison in `out`, or None: a folder's own results.json (a
    notebook's, another tool's) beside a report.md of its own was taken for a report, and both were
    replaced, with any of its own files named as a report's figures are."""
    try:
        earlier = json.loads(read_file(out / "results.json"))
    except (OSError, ValueError):
        return None
    is_comparison = isinstance(earlier, dict) and {"dataset", "split", "scores"} <= earlier.keys()
    return earlier if is_comparison else None


def fold_summary(fold_scores: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation of RMSE and MAE per model over folds (rows: fold, model, ...)."""
    summary = fold_scores.groupby("model", sort=False).agg(
        engine=("engine", "first"),
        rmse_mean=("rmse", "mean"),
        rmse_std=("rmse", "std"),
        mae_mean=("mae", "mean"),
        mae_std=("mae", "std"),
        seconds_mean=("seconds", "mean"),
        parameters=("parameters", "first"),
    )
    return summary.reset_index()


def markdown_table(frame: pd.DataFrame, digits: int = 4) -> str:
    """A GitHub markdown table (no tabulate dependency)."""

    def cell(value: Any) -> str:
        if value is None:  # a column of objects with a row that has no value
            return ""
        if isinstance(value, float | np.floating):
            number = float(value)
            if np.isnan(number):
                return ""
            # Tiny values (a cancelled gradient) keep their size instead of printing as 0.0000.
            return f"{number:.2e}" if 0 < abs(number) < 10.0**-digits else f"{number:.{digits}f}"
        return str(value).replace("|", "\\|")

    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def _save(figure: Figure, path: Path) -> str:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return path.name


def plot_learning_curves(comparison: Comparison, path: Path) -> str:
    figure = Figure(figsize=(7, 4.5))
    axes = figure.subplots()
    for score in comparison.scores:
        if score.valid_rmse:  # a ranking model has no RMSE to follow
            axes.plot(range(1, len(score.valid_rmse) + 1), score.valid_rmse, marker="o", label=score.name)
    for score in comparison.scores:
        if score.name in BASELINES:
            axes.axhline(score.rmse, linestyle="--", color="grey", linewidth=1)
            axes.annotate(score.name, (1, score.rmse), fontsize=8, color="grey", va="bottom")
    axes.set(
        xlabel="epoch", ylabel="test RMSE after each epoch", title=f"Learning curves ({comparison.split})"
    )
    axes.set_ylim(top=min(1.3, axes.get_ylim()[1]))
    _legend(axes)
    return _save(figure, path)


def plot_rmse(scores: pd.DataFrame, path: Path, title: str) -> str:
    """Bar chart of RMSE per model, with fold spread as error bars when `rmse_std` is present."""
    figure = Figure(figsize=(7, 4))
    axes = figure.subplots()
    values = scores["rmse_mean"] if "rmse_mean" in scores else scores["rmse"]
    errors = scores.get("rmse_std")
    axes.bar(scores["model"], values, yerr=errors, capsize=4, color="tab:blue")
    axes.set(ylabel="test RMSE (lower is better)", title=title)
    axes.set_ylim(bottom=max(0.0, float(values.min()) - 0.1))
    return _save(figure, path)


def ranking_summary(fold_ranking: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over folds of the report's ranking columns (rows: fold, model, ...)."""
    grouped = fold_ranking.groupby("model", sort=False)[list(RANKING_COLUMNS[:5])]
    means, spreads = grouped.mean(), grouped.std()
    summary = pd.DataFrame(index=means.index)
    for column in means:
        summary[f"{column}_mean"], summary[f"{column}_std"] = means[column], spreads[column]
    return summary.reset_index()


def _trained_models(scores: pd.DataFrame, ranking: pd.DataFrame) -> pd.DataFrame:
    """Each trained model's (not a baseline's) rating scores beside its list metrics."""
    joined = scores.merge(ranking, on="model")
    return joined[~joined["model"].isin(BASELINES)].reset_index(drop=True)


def plot_ndcg_against_rmse(scores: pd.DataFrame, ranking: pd.DataFrame, path: Path) -> str:
    """Each trained model's test RMSE against its NDCG@10, with the popularity chart's NDCG@10 as a line."""
    joined = _trained_models(scores, ranking)
    rated = joined[joined["rmse"].notna()]
    figure = Figure(figsize=(7, 4.5))
    axes = figure.subplots()
    axes.scatter(rated["rmse"], rated["ndcg@10"], color="tab:blue")
    for row in rated.itertuples(index=False):
        axes.annotate(str(row.model), (row.rmse, row[rated.columns.get_loc("ndcg@10")]), fontsize=8)
    left = float(rated["rmse"].min()) if len(rated) else 0.0
    # Lines for what has no RMSE: the popularity chart, and the ranking models (their scores are no ratings).
    lines = [("most-popular", ranking.loc[ranking["model"] == "most-popular", "ndcg@10"], "grey")]
    no_rmse = joined[joined["rmse"].isna()]
    lines += [
        (f"{name} (no RMSE)", pd.Series([value]), "tab:green")
        for name, value in zip(no_rmse["model"], no_rmse["ndcg@10"], strict=True)
    ]
    for name, value, colour in lines:
        if len(value):
            axes.axhline(float(value.iloc[0]), linestyle="--", color=colour, linewidth=1)
            axes.annotate(name, (left, float(value.iloc[0])), fontsize=8)
    axes.set(
        xlabel="test RMSE (lower is better)",
        ylabel="NDCG@10, full ranking (higher is better)",
        title="Rating accuracy against list quality",
    )
    return _save(figure, path)


def plot_fold_in(curves: dict[str, pd.DataFrame], path: Path, known_name: str = "ratings") -> str:
    """RMSE and NDCG@10 of folded-in users against ratings known (`known_name`: what they are), one
    line per model, the trained model's value as a dashed line of the same colour; NDCG@10 alone where
    no model has an RMSE."""
    has_rmse = any(curve["rmse"].notna().any() for curve in curves.values())
    figure = Figure(figsize=(11, 4.2) if has_rmse else (5.8, 4.2))
    # Ranking models alone have no RMSE: one panel, not an empty one beside it.
    rmse_axes, ndcg_axes = figure.subplots(1, 2) if has_rmse else (None, figure.subplots(1, 1))
    for index, (name, curve) in enumerate(curves.items()):
        colour = f"C{index}"
        folded = curve[curve["ratings_known"] != "trained"]
        trained = curve[curve["ratings_known"] == "trained"].iloc[0]
        known = folded["ratings_known"].astype(int)
        for axes, column in ((rmse_axes, "rmse"), (ndcg_axes, "ndcg@10")):
            if axes is None or folded[column].isna().all():  # a ranking model has no RMSE
                continue
            axes.plot(known, folded[column], marker="o", color=colour, label=name)
            axes.axhline(float(trained[column]), linestyle="--", color=colour, linewidth=1)
    if rmse_axes is not None:
        rmse_axes.set(
            xlabel="ratings known (0: bias-only cold start)", ylabel="test RMSE", title="Fold-in: RMSE"
        )
    ndcg_axes.set(xlabel=f"{known_name} known", ylabel="NDCG@10", title="Fold-in: NDCG@10 (dashed: trained)")
    _legend(ndcg_axes)
    return _save(figure, path)


def _legend(axes: Axes) -> None:
    """The axes' legend, where anything was drawn with a label (matplotlib warns of an empty one)."""
    if axes.get_legend_handles_labels()[0]:
        axes.legend()


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _pairs(implicit: bool) -> str:
    """What the data's user-item pairs are called: interactions (counts of events) or ratings."""
    return "interactions" if implicit else "ratings"


def ranking_paragraph(scores: pd.DataFrame, ranking: pd.DataFrame, *, implicit: bool = False) -> str:
    """What RMSE and NDCG@10 say about each trained model, in numbers read from the tables; `implicit`:
    the data are interactions (counts), not ratings."""
    joined = _trained_models(scores, ranking)
    if joined.empty:
        return ""
    if joined["ndcg@10"].isna().all():  # no list had a relevant item to find
        return f"No test user has a relevant test {_pairs(implicit)[:-1]}, so no list could be judged."
    rated = joined["rmse"].notna()
    by_rmse = joined["rmse"].rank(method="min")
    by_ndcg = joined["ndcg@10"].rank(method="min", ascending=False).astype(int)
    popular = ranking.loc[ranking["model"] == "most-popular", "ndcg@10"]
    chart = float(popular.iloc[0]) if len(popular) else float("nan")
    lines = []
    for index, row in joined.iterrows():
        shown = (round(float(row["ndcg@10"]), 3), round(chart, 3))  # as the sentence prints them
        versus = "above" if shown[0] > shown[1] else "level with" if shown[0] == shown[1] else "below"
        fit = (
            f"is {_ordinal(int(by_rmse[index]))} of {int(rated.sum())} by RMSE ({row['rmse']:.4f})"
            if rated[index]
            else "is trained to rank and predicts no rating (no RMSE)"
        )
        lines.append(
            f"`{row['model']}` {fit} and {_ordinal(by_ndcg[index])} of {len(joined)} by NDCG@10 "
            f"({row['ndcg@10']:.3f}, {versus} the popularity chart's {chart:.3f}; coverage@10 "
            f"{row['coverage@10']:.3f})."
        )
    both = joined[rated]
    agree = ""  # with fewer than two rating models there are no two orders to compare
    if len(both) > 1:
        rho = float(both["rmse"].rank().corr(-both["ndcg@10"].rank()))
        agree = f" Spearman's rho between the two orders here: {rho:.2f}."
    if not rated.any():  # ranking models alone: no RMSE to set beside the lists
        went, had = ("interact with", "interacted with") if implicit else ("rate highly", "rated")
        lines.append(
            f"NDCG@10 asks whether the items a user went on to {went} are at the top of a list drawn from "
            f"every item they had not {had}. The ranking models are trained on which items people chose, "
            "as the popularity chart ranks by how many users chose each item."
        )
        return " ".join(lines)
    lines.append(
        "A lower RMSE is a better fit to the ratings a user gave; NDCG@10 asks whether the items a user "
        f"went on to rate highly are at the top of a list drawn from every item they had not rated.{agree} "
        "Rating models are trained on the "
        "ratings people chose to give, not on which items they chose, so a low RMSE need not give "
        "good lists, while a popularity chart ranks exactly by what people choose"
        + (", and the ranking models are trained on that choice itself." if not rated.all() else ".")
    )
    return " ".join(lines)


def plot_bias_scatter(items: pd.DataFrame, model: str, implied: str | None, path: Path) -> str:
    """`model`'s item biases against the `implied` model's, the damped baseline's and the planted ones."""
    others = [c for c in (implied, BASELINE_COLUMN, "planted") if c is not None and c in items]
    figure = Figure(figsize=(5 * len(others), 4.5))
    axes = figure.subplots(1, len(others), squeeze=False)
    for ax, other in zip(axes[0], others, strict=True):
        ax.scatter(items[other], items[model], s=6, alpha=0.5)
        r = items[other].corr(items[model])
        ax.set(
            xlabel=f"{other} item bias",
            ylabel=f"{model} item bias",
            title=f"{model} vs {other} (r = {r:.3f})",
        )
    return _save(figure, path)


def plot_extremes(lowest: pd.DataFrame, highest: pd.DataFrame, model: str, path: Path) -> str:
    both = pd.concat([lowest, highest[::-1]])
    figure = Figure(figsize=(8, 0.32 * len(both) + 1.2))
    axes = figure.subplots()
    colours = ["tab:red"] * len(lowest) + ["tab:green"] * len(highest)
    axes.barh(both["title"].str.slice(0, 45), both[model], color=colours)
    axes.set(xlabel=f"{model} item bias", title=f"Lowest and highest item biases ({model})")
    return _save(figure, path)


def plot_bias_distributions(items: pd.DataFrame, columns: list[str], path: Path) -> str:
    figure = Figure(figsize=(7, 4.5))
    axes = figure.subplots()
    for column in columns:
        axes.hist(items[column], bins=50, histtype="step", linewidth=1.5, label=column)
    axes.set(xlabel="item bias", ylabel="items", title="Distribution of item biases")
    _legend(axes)
    return _save(figure, path)


def plot_item_map(
    vectors: np.ndarray, items: pd.DataFrame, model: str, path: Path, n_titles: int = 40
) -> str:
    """fastbook's map: the most rated items on the first two principal components of `model`'s item
    factors `vectors`."""
    chosen = items.sort_values("n_ratings", ascending=False, kind="stable").index[:n_titles].to_numpy()
    points = principal_components(vectors[chosen])
    figure = Figure(figsize=(10, 8))
    axes = figure.subplots()
    axes.scatter(points[:, 0], points[:, 1], s=10)
    for (x, y), title in zip(points, items.loc[chosen, "title"], strict=True):
        axes.annotate(str(title)[:30], (x, y), fontsize=7)
    axes.set(
        xlabel="first principal component",
        ylabel="second principal component",
        title=f"Item factors of the {n_titles} most rated items ({model})",
    )
    return _save(figure, path)


def similar_items_table(
    vectors: np.ndarray, items: pd.DataFrame, n_queries: int = 5, n: int = 5
) -> pd.DataFrame:
    """For the most rated items, their nearest items by cosine similarity of the factors."""
    queries = items.sort_values("n_ratings", ascending=False, kind="stable").index[:n_queries]
    rows = []
    for query in queries:
        neighbours, similarity = cosine_neighbours(vectors, int(query), n)
        for neighbour, value in zip(neighbours, similarity, strict=True):
            rows.append((items.at[query, "title"], items.at[neighbour, "title"], float(value)))
    return pd.DataFrame(rows, columns=["item", "similar item", "cosine"])


def _overridden(overrides: dict[str, Any]) -> str:
    """The settings given to every model over its defaults, as the report's first paragraph says them."""
    if not overrides:
        return ""
    return (
        ", except " + ", ".join(f"`{name}` {value}" for name, value in overrides.items()) + " for every one"
    )


def write_report(
    comparison: Comparison,
    out: Path,
    *,
    fold_scores: pd.DataFrame | None = None,
    fold_ranking: pd.DataFrame | None = None,
    extra_sections: dict[str, tuple[str, pd.DataFrame]] | None = None,
) -> Path:
    """Write report.md, results.json and the figures for `comparison` into `out`; return report.md.

    `fold_scores` (fold, model, engine, rmse, mae, seconds, parameters rows) adds the mean and spread over
    folds, and `fold_ranking` (fold, model, metric@k rows) the same for the top-N lists;
    `extra_sections` adds titled tables (e.g. measurements of embedding versus Linear).
    Everything is drawn in a folder of its own inside `out` first, then moved in, replacing an earlier
    report's files (those this one does not draw are removed): stopped part way, the run leaves the
    earlier report whole.
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
        draft = Path(tempfile.mkdtemp(dir=out, prefix=DRAFT_PREFIX))
        try:
            _write_report_files(comparison, draft, fold_scores, fold_ranking, extra_sections)
            with interruptions_held_back():  # the earlier report's files, or the new one's: never a mix
                for name in REPORT_FILES:
                    if not (draft / name).exists():
                        (out / name).unlink(missing_ok=True)
                for path in sorted(draft.iterdir(), key=lambda path: path.name == "report.md"):  # it last
                    os.replace(path, out / path.name)
        finally:
            shutil.rmtree(draft, ignore_errors=True)
    except OSError as error:  # a full disk, or a folder that cannot be written
        raise RecsysError(f"cannot write the report in {out}: {error.strerror or error}") from None
    return out / "report.md"


def _write_report_files(
    comparison: Comparison,
    out: Path,
    fold_scores: pd.DataFrame | None,
    fold_ranking: pd.DataFrame | None,
    extra_sections: dict[str, tuple[str, pd.DataFrame]] | None,
) -> None:
    """The report's files, written into `out`."""
    scores = comparison.score_table()
    items, users = item_table(comparison), user_table(comparison)
    biased = models_with_biases(comparison)
    item_corr, user_corr = bias_correlations(items, biased), bias_correlations(users, biased)
    kinds = {
        name: biases.kind
        for name in biased
        if (biases := learned_biases(comparison.models[name])) is not None
    }
    explicit = [name for name, kind in kinds.items() if kind == "explicit"]
    implied = [name for name, kind in kinds.items() if kind == "implied"]
    # The first model with explicit biases is the one whose extremes, scatter and item map are shown.
    reference = explicit[0] if explicit else None
    summary = fold_summary(fold_scores) if fold_scores is not None else None

    # Interactions (counts of views, plays, purchases) are no ratings: the report says what they are.
    pairs = _pairs(comparison.dataset.implicit)
    md = [f"# Model comparison on {comparison.dataset.name}", ""]
    md.append(
        f"Split `{comparison.split}`, seed {comparison.seed}; {len(comparison.data.train):,} training and "
        f"{len(comparison.data.test):,} test {pairs}"
        + (" (user-item pairs, each weighted by its count of events)" if comparison.dataset.implicit else "")
        + f". Test {pairs} whose user or item is unseen in "
        f"training: {len(comparison.data.unknown_test_ratings)}, policy `{comparison.unknown}`. Every "
        f"model uses its defaults for the engine shown{_overridden(comparison.overrides)}; baselines are "
        "closed-form (no training)."
    )
    md += ["", "## Accuracy and cost", ""]
    if comparison.dataset.implicit:  # an RMSE of counts compares nothing: the lists judge every model
        md += [markdown_table(scores.drop(columns=["rmse", "mae"])), ""]
        md += [
            "Interactions are counts of events, with no ratings to predict: no model or baseline is "
            "given an RMSE or MAE here (nor a figure of them); the top-N lists below judge them all.",
            "",
        ]
    else:
        md += [markdown_table(scores), ""]
        if summary is not None:
            folds = ", ".join(map(str, fold_scores["fold"].unique()))  # type: ignore[index]
            md += [f"Over folds {folds} (mean and standard deviation):", "", markdown_table(summary), ""]
            md.append(f"![RMSE per model]({plot_rmse(summary, out / 'rmse.png', 'Test RMSE over folds')})")
        else:
            title = f"Test RMSE ({comparison.split})"
            md.append(f"![RMSE per model]({plot_rmse(scores, out / 'rmse.png', title)})")
        curves = plot_learning_curves(comparison, out / "learning_curves.png")
        md += ["", f"![Learning curves]({curves})", ""]
    md += _ranking_section(comparison, scores, fold_ranking, out)
    if comparison.feature_groups is not None:
        md += ["## What each kind of information adds", ""]
        md.append(
            "Test RMSE of each model that reads what users and items are, trained again with its ids "
            "alone and with each feature group added: `implicit`, the items each user rated and the users "
            "who rated each item (training ratings only); `side`, the users' and items' side features."
        )
        if comparison.feature_groups["features"].str.contains("time").any():
            md[-1] += (
                " `time` (bfm), a bias per user and day of the ratings: its rmse reads each test rating's "
                "day, its `cold_n` pairs without a time (at a user-day never seen)."
            )
        md += ["", markdown_table(comparison.feature_groups), ""]
        md.append(
            "`cold_n`: RMSE of the test users with at least 5 training ratings, each folded in from its "
            "first n (by time) and starting from its features, as the fold-in section above describes: "
            "what the features give a user the model has barely seen."
        )
        md.append("")

    md += ["## What the biases learned", ""]
    ranking = [s.name for s in comparison.scores if s.name not in BASELINES and math.isnan(s.rmse)]
    no_bias = [s.name for s in comparison.scores if s.name not in {*BASELINES, *biased, *ranking}]
    if no_bias:
        md.append(
            f"{', '.join(f'`{n}`' for n in no_bias)} {'has' if len(no_bias) == 1 else 'have'} no per-user "
            "or per-item bias, explicit or implied."
        )
    if ranking:
        md.append(
            f"The ranking models ({', '.join(f'`{n}`' for n in ranking)}) are left out here: their scores "
            "are no ratings, so a bias of theirs (`bpr` has one per item) is no offset from a mean rating."
        )
    if explicit:
        named = ", ".join(f"`{name}`" for name in explicit)
        md.append(f"Explicit biases ({named}): one free bias per user and per item, learned.")
    if implied:
        named = ", ".join(f"`{name}`" for name in implied)
        md.append(
            f"Implied biases ({named}): no bias of their own, but each side has one offset "
            "vector shared by every id (b_u for users, b_i for items); with u and i the user's and the "
            "item's factor vectors the score expands as (u + b_u)·(i + b_i) = u·i + b_u·i + u·b_i + b_u·b_i, "
            "so b_u·i acts as item i's bias and u·b_i as user u's, tied to the factors rather than free. "
            "Those are the biases shown for these models below."
        )
    if biased:  # else the tables would be headers alone
        against = "the damped baseline, mean rating and popularity"
        if "planted" in items:  # the generator's own biases, which the reader has not met before here
            against = (
                "the damped baseline, mean rating, popularity and `planted`, the biases the synthetic "
                "ratings were generated from"
            )
        md += ["", f"Item biases correlated with {against}:", ""]
        md += [markdown_table(item_corr), "", "User biases:", "", markdown_table(user_corr), ""]
    else:
        md.append("")
    if len(biased) > 1:
        md += [
            "Item biases across models (Pearson):",
            "",
            markdown_table(items[biased].corr().reset_index()),
            "",
        ]
    if reference is not None:
        lowest, highest = extreme_items(items, reference)
        md += ["Lowest item biases (liked less than their factors predict):", "", markdown_table(lowest), ""]
        md += ["Highest item biases:", "", markdown_table(highest), ""]
        extremes = plot_extremes(lowest, highest, reference, out / "item_bias_extremes.png")
        md.append(f"![Extreme biases]({extremes})")
        scatter = plot_bias_scatter(
            items, reference, implied[0] if implied else None, out / "item_bias_scatter.png"
        )
        md += ["", f"![Bias scatter]({scatter})", ""]
    columns = [*biased, BASELINE_COLUMN] + (["planted"] if "planted" in items else [])
    if len(columns) > 1:  # the baseline's alone says nothing of the models
        figure = plot_bias_distributions(items, columns, out / "bias_distributions.png")
        md += [f"![Bias distributions]({figure})", ""]

    if reference is not None and (vectors := item_vectors(comparison.models[reference])) is not None:
        md += [
            "## Item factors",
            "",
            f"![Item map]({plot_item_map(vectors, items, reference, out / 'item_map.png')})",
            "",
        ]
        similar = similar_items_table(vectors, items)
        md += [
            f"Most similar items by cosine similarity of {reference} item factors:",
            "",
            markdown_table(similar),
            "",
        ]

    for title, (text, table) in (extra_sections or {}).items():
        md += [f"## {title}", "", text, "", markdown_table(table), ""]

    results: dict[str, Any] = {
        "dataset": comparison.dataset.name,
        "ratings_file": comparison.dataset.origin.get("ratings"),
        "split": comparison.split,
        "seed": comparison.seed,
        "unknown_policy": comparison.unknown,
        "n_test_unknown": len(comparison.data.unknown_test_ratings),
        "scores": scores.to_dict(orient="records"),
        "learning_curves": {s.name: s.valid_rmse for s in comparison.scores if s.valid_rmse},
        "item_bias_correlations": item_corr.to_dict(orient="records"),
        "user_bias_correlations": user_corr.to_dict(orient="records"),
    }
    results["relevance_threshold"] = comparison.threshold
    results["overrides"] = comparison.overrides
    results["ranking"] = comparison.ranking.to_dict(orient="records")
    results["fold_in"] = {name: curve.to_dict(orient="records") for name, curve in comparison.fold_in.items()}
    if comparison.feature_groups is not None:
        results["feature_groups"] = comparison.feature_groups.to_dict(orient="records")
    if summary is not None:
        results["folds"] = fold_scores.to_dict(orient="records")  # type: ignore[union-attr]
        results["fold_summary"] = summary.to_dict(orient="records")
    if fold_ranking is not None:
        results["ranking_folds"] = fold_ranking.to_dict(orient="records")
        results["ranking_fold_summary"] = ranking_summary(fold_ranking).to_dict(orient="records")
    for title, (_, table) in (extra_sections or {}).items():
        results[title] = table.to_dict(orient="records")
    write_json(out / "results.json", json.loads(json.dumps(results, default=float)))
    (out / "report.md").write_text("\n".join(md) + "\n")


def _listed(names: Sequence[str]) -> str:
    """Model names as a sentence lists them: `a`, `b` and `c`."""
    return listed([f"`{name}`" for name in names])


def _relevance_words(comparison: Comparison) -> tuple[str, str]:
    """What makes a test item relevant, and the graded NDCG's gain, in the words of the data: ratings,
    or interactions' counts, at the comparison's threshold (None: the lowest test value stands for it)."""
    implicit, threshold = comparison.dataset.implicit, comparison.threshold
    value = "count" if implicit else "rating"
    lowest, highest = comparison.dataset.rating_scale
    if threshold is None:
        relevant = "every test interaction" if implicit else "every test item"
        return relevant, f"1 + its {value} - the lowest test {value}"
    # The least value the data holds at the threshold or above (a 4 on half stars, whose threshold is
    # 3.875), whose gain the example gives: no rating of the threshold's own value may exist.
    values = comparison.dataset.ratings["rating"]
    first = float(values[values >= threshold].min()) if (values >= threshold).any() else threshold
    if implicit:
        relevant = (
            f"every test interaction (each has a count of at least {lowest:g})"
            if threshold <= lowest
            else f"a test interaction with a count of at least {threshold:g}"
        )
        example = f"a count of {first:g} gains {1 + first - threshold:g}"
        top = f" and one of {highest:g} gains {1 + highest - threshold:g}"
    else:
        relevant = f"a test rating of at least {threshold:g}"
        example = f"with {threshold:g} relevant a {first:g} gains {1 + first - threshold:g}"
        top = f" and a {highest:g} gains {1 + highest - threshold:g}"
    return relevant, f"1 + its {value} - {threshold:g}, so {example}" + (top if highest > first else "")


def _ranking_section(
    comparison: Comparison, scores: pd.DataFrame, fold_ranking: pd.DataFrame | None, out: Path
) -> list[str]:
    """The report's top-N section: protocol, table, folds, the NDCG-against-RMSE figure, fold-in."""
    ranking = comparison.ranking
    relevant, graded = _relevance_words(comparison)
    rate, rated = ("interact with", "interacted with") if comparison.dataset.implicit else ("rate", "rated")
    md = ["## Top-N lists", ""]
    md.append(
        f"Each of {int(ranking['users'].iloc[0]):,} test users with at least one relevant item gets a list "
        f"drawn from every item they did not {rate} in training, ranked in full (no sampled negatives); "
        f"relevant means {relevant}. Recall divides by all of a user's relevant items; NDCG's gain is 1 "
        f"per relevant item (graded: {graded}); coverage is the share of the catalogue shown to "
        f"anyone, popularity the mean share of training users who {rated} what is shown, Gini the "
        "inequality of exposure. Baselines: " + ", ".join(f"`{name}`" for name in RANKING_BASELINES) + "."
    )
    md += ["", markdown_table(ranking[["model", *RANKING_COLUMNS]], digits=3), ""]
    if fold_ranking is not None:
        md += ["Over the folds (mean and standard deviation):", ""]
        md += [markdown_table(ranking_summary(fold_ranking), digits=3), ""]
    md.append(ranking_paragraph(scores, ranking, implicit=comparison.dataset.implicit))
    if _trained_models(scores, ranking)["rmse"].notna().any():
        figure = plot_ndcg_against_rmse(scores, ranking, out / "ndcg_against_rmse.png")
        md += ["", f"![NDCG@10 against RMSE]({figure})", ""]
    else:  # its lines alone would say nothing the table does not
        md += [
            "",
            "No figure of NDCG@10 against RMSE: none of these models predicts ratings to have one.",
            "",
        ]
    first = next(iter(comparison.fold_in.values()), None)
    pairs = _pairs(comparison.dataset.implicit)
    if first is not None and not first.attrs.get("users", 0):
        md += [f"## New users from a few {pairs} (fold-in)", ""]
        md += [
            f"No test user has at least 20 training {pairs} to fold in from, so there are no fold-in curves.",
            "",
        ]
    elif first is not None:
        md += [f"## New users from a few {pairs} (fold-in)", ""]
        md.append(
            f"For the {first.attrs.get('users', 0):,} test users with at least 20 training {pairs}, all but "
            "their first n (by time) are hidden; each is folded into the trained model from those n "
            "(a ridge regression for the user's vector and bias, the items fixed; a ranking model's user "
            f"is one row of implicit ALS) and scored on their test {pairs}. At n = 0 a model with a bias "
            "of its own per item ranks by them (the bias-only cold start); one without (its biases, if "
            "any, implied by the user's vector: `linear`, `embproj`) ties every item, so its n = 0 row "
            "says nothing. `trained` is the model that saw all of them."
        )
        featured = [
            name for name in comparison.fold_in if members_use_features(rating_model(comparison.models[name]))
        ]
        # Only a model that coded users' side features starts a new user from them (svdpp reads no
        # items' table, and ml-latest-small has no users' one): the others start from the items rated.
        described = [
            name for name in featured if keeps_codings(rating_model(comparison.models[name]), "user")
        ]
        rated_only = [name for name in featured if name not in described]
        if described:
            md.append(
                f" {_listed(described)} {'reads' if len(described) == 1 else 'read'} what users are: each "
                "user starts from its side features and the n items it rated, and the ridge corrects that "
                "start, so n = 0 is a cold start from the features alone."
            )
        if rated_only:
            md.append(
                f" {_listed(rated_only)} {'has' if len(rated_only) == 1 else 'have'} no side features of "
                "users here: each user starts from the n items it rated alone."
            )
        with_rmse = any(curve["rmse"].notna().any() for curve in comparison.fold_in.values())
        for column in ("rmse", "ndcg@10") if with_rmse else ("ndcg@10",):  # ranking models alone: no RMSE
            table = pd.DataFrame({f"{pairs}_known": first["ratings_known"]})
            for name, curve in comparison.fold_in.items():
                table[name] = curve[column].to_numpy()
            md += ["", f"{column} of the folded-in users, per model:", "", markdown_table(table)]
        md += [""]
        md += [f"![Fold-in]({plot_fold_in(comparison.fold_in, out / 'fold_in.png', pairs)})", ""]
    return md
