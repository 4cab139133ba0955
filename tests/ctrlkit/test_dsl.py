"""The CtrlKit DSL parser: the seed document, the syntax it accepts, and errors that point at the problem."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from textwrap import dedent

import pytest

from capa_py.ctrlkit.codegen import generate
from capa_py.ctrlkit.dsl import DSLError, StateRef, parse, parse_file
from capa_py.ctrlkit.state import Selector

FIXTURE = Path(__file__).parent / "fixtures" / "cronjob.ctrlkit"

PRELUDE = """\
bind v1 k8s.io/api/core/v1
bind batch/v1 k8s.io/api/batch/v1
alias CronJob batch/v1/CronJob
alias Job batch/v1/Job
alias ConfigMap v1/ConfigMap
"""  # five lines: bodies below start at line 6


def parse_error(text: str) -> DSLError:
    with pytest.raises(DSLError) as caught:
        parse(text, "cronjob.ctrlkit")
    return caught.value


# -- the seed document -----------------------------------------------------------------------------------


def test_seed_document_declares_binds_aliases_and_one_manager() -> None:
    document = parse_file(FIXTURE)

    assert [(b.group_version, b.package) for b in document.binds] == [
        ("v1", "k8s.io/api/core/v1"),
        ("batch/v1", "k8s.io/api/batch/v1"),
        ("controller-kit-demo/v1", "controller-kit-demo/api/v1"),
    ]
    assert [(a.name, a.gvk) for a in document.aliases] == [
        ("CronJob", "controller-kit-demo/v1/CronJob"),
        ("Job", "batch/v1/Job"),
    ]
    (decl,) = document.decls
    assert (decl.name, decl.target.name) == ("CronJobControllerManager", "CronJob")
    assert decl.doc == "CronJobControllerManager declares all the actions needed by the CronJobController."


def test_seed_state_is_a_list_of_jobs_with_three_parsed_selectors() -> None:
    (decl,) = parse_file(FIXTURE).decls

    (jobs,) = decl.states
    assert (jobs.name, jobs.kind.name, jobs.is_list) == ("jobs", "Job", True)
    assert [line.selector for line in jobs.selectors] == [
        Selector("labels", "cronjob", "${target.Name}"),
        Selector("fields", ".metadata.controller", "${target.Name}"),
        Selector("owned"),
    ]
    assert jobs.selectors[0].text == "labels/cronjob=${target.Name}"


def test_seed_actions_keep_their_states_and_doc_comments() -> None:
    (decl,) = parse_file(FIXTURE).decls

    assert [(a.name, [s.name for s in a.states]) for a in decl.actions] == [
        ("ListActiveJobsAndUpdateStatus", ["jobs"]),
        ("CleanUpOldJobsExceedsHistoryLimits", ["jobs"]),
        ("RunNextScheduledJob", []),
        ("UpdateCronJobStatus", []),
    ]
    assert decl.actions[0].doc == "List all active jobs, and update the status."
    assert decl.actions[2].doc == (
        "Run the next job if it's on time, or otherwise we should wait\nuntil the next scheduled time."
    )


def test_seed_nodes_carry_their_line_and_column() -> None:
    document = parse_file(FIXTURE)
    (decl,) = document.decls
    (jobs,) = decl.states
    action = decl.actions[0]

    assert (document.aliases[1].line, document.aliases[1].col) == (6, 1)
    assert (decl.line, decl.col) == (9, 1)
    assert (decl.target.line, decl.target.col) == (9, 35)
    assert (jobs.line, jobs.col) == (11, 9)
    assert (jobs.kind.line, jobs.kind.col) == (11, 16)  # after the '[]'
    assert [(s.line, s.col) for s in jobs.selectors] == [(12, 13), (13, 13), (14, 13)]
    assert (action.line, action.col) == (20, 9)
    assert (action.states[0].line, action.states[0].col) == (20, 39)


# -- syntax accepted -------------------------------------------------------------------------------------


def test_single_object_state_with_empty_selector_block_on_one_line() -> None:
    document = parse(PRELUDE + "decl M for CronJob { state { config ConfigMap {} } action { A(config) } }\n")

    (state,) = document.decls[0].states
    assert (state.name, state.kind.name, state.is_list, state.selectors) == ("config", "ConfigMap", False, ())


def test_trailing_comments_are_ignored_but_double_slashes_inside_values_are_kept() -> None:
    document = parse(
        "bind v1 k8s.io/api/core/v1  // the core group\n"
        "alias ConfigMap v1/ConfigMap // short name\n"
        "decl M for ConfigMap {\n"
        "    state {\n"
        "        peers []ConfigMap {\n"
        "            fields/.data.url=http://example.com  // where it points\n"
        "            owned // only ours\n"
        "        }\n"
        "    }\n"
        "}\n"
    )

    (state,) = document.decls[0].states
    assert [line.selector for line in state.selectors] == [
        Selector("fields", ".data.url", "http://example.com"),
        Selector("owned"),
    ]


def test_comment_separated_by_a_blank_line_is_not_documentation() -> None:
    document = parse(PRELUDE + "// about the file\n" + "\n" + "decl M for CronJob {\n}\n")

    assert document.decls[0].doc == ""


def test_state_and_action_blocks_may_repeat_and_accumulate() -> None:
    document = parse(
        PRELUDE
        + dedent(
            """\
            decl M for CronJob {
                state { jobs []Job {
                } }
                action { A(jobs) }
                state { config ConfigMap {
                    name=${target.Name}-config
                } }
                action { B(jobs, config) }
            }
            """
        )
    )

    decl = document.decls[0]
    assert [s.name for s in decl.states] == ["jobs", "config"]
    assert [a.name for a in decl.actions] == ["A", "B"]
    assert [s.name for s in decl.actions[1].states] == ["jobs", "config"]


def test_windows_line_endings_parse_like_unix_ones() -> None:
    text = FIXTURE.read_text(encoding="utf-8")

    assert parse(text.replace("\n", "\r\n"), "x") == parse(text, "x")


# -- errors: what was expected, what was found, and where ------------------------------------------------


def after_prelude(*lines: str) -> str:
    """A document of the prelude and ``lines``; the first of ``lines`` is line 6."""
    return PRELUDE + "".join(f"{line}\n" for line in lines)


DECL = "decl M for CronJob {"  # line 6 in after_prelude(DECL, ...); its '{' is at column 20
STATE = "    state {"
JOBS = "        jobs []Job {"  # the '{' is at column 20


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            after_prelude(DECL, STATE, "        jobs []Job", "        jobs2 []Job {"),
            "cronjob.ctrlkit:9:9: expected '{' after the kind of state 'jobs', found 'jobs2'",
            id="state-without-brace",
        ),
        pytest.param(
            "bind batch/v1\n",
            "cronjob.ctrlkit:1:14: expected a package after 'bind batch/v1', found end of line",
            id="bind-without-package",
        ),
        pytest.param(
            "bind Batch/V1 k8s.io/api/batch/v1\n",
            "cronjob.ctrlkit:1:6: expected a group/version after 'bind' such as 'apps/v1' or 'v1', "
            "found 'Batch/V1'",
            id="bind-bad-group-version",
        ),
        pytest.param(
            "bind v1 k8s.io/api/core/v1 extra\n",
            "cronjob.ctrlkit:1:28: expected end of line after 'bind v1 k8s.io/api/core/v1', found 'extra'",
            id="bind-extra-word",
        ),
        pytest.param(
            "bind batch/v1 k8s.io/api/batch/v1\nalias Job batch/v1\n",
            "cronjob.ctrlkit:2:11: expected a group/version/kind such as 'batch/v1/Job' after 'alias Job', "
            "found 'batch/v1'",
            id="alias-without-kind",
        ),
        pytest.param(
            "  state {\n",
            "cronjob.ctrlkit:1:3: expected 'bind', 'alias' or 'decl', found 'state'",
            id="top-level-garbage",
        ),
        pytest.param(
            after_prelude("decl M CronJob {"),
            "cronjob.ctrlkit:6:8: expected 'for' after 'decl M', found 'CronJob'",
            id="decl-without-for",
        ),
        pytest.param(
            after_prelude(DECL, "    status {"),
            "cronjob.ctrlkit:7:5: expected 'state', 'action' or '}' in the body of decl 'M', found 'status'",
            id="unknown-block",
        ),
        pytest.param(
            after_prelude(DECL, STATE, "        jobs {"),
            "cronjob.ctrlkit:8:14: expected the kind of state 'jobs' (Kind or []Kind), found '{'",
            id="state-without-kind",
        ),
        pytest.param(
            after_prelude(DECL, STATE, JOBS, "            label/a=b"),
            "cronjob.ctrlkit:9:13: expected a selector (name=VALUE, labels/KEY=VALUE, fields/PATH=VALUE or "
            "owned), found 'label/a=b'",
            id="unknown-selector",
        ),
        pytest.param(
            after_prelude(DECL, STATE, JOBS, "            owned }"),
            "cronjob.ctrlkit:9:13: expected one selector per line (name=VALUE, labels/KEY=VALUE, "
            "fields/PATH=VALUE or owned) with the state's '}' on its own line, found 'owned }'",
            id="brace-after-selector",
        ),
        pytest.param(
            after_prelude(DECL, STATE, JOBS, "            labels/app=x-${Name}"),
            "cronjob.ctrlkit:9:26: expected a reference to the target such as '${target.Name}', "
            "found '${Name}'",
            id="reference-not-to-target",
        ),
        pytest.param(
            after_prelude(DECL, STATE, JOBS, "            labels/app=${target.Name"),
            "cronjob.ctrlkit:9:24: expected '}' to close the reference, found '${target.Name'",
            id="unclosed-reference",
        ),
        pytest.param(
            after_prelude(DECL, STATE, "        cm ConfigMap {", "            name=a", "            name=b"),
            "cronjob.ctrlkit:10:13: expected at most one 'name' selector in state 'cm', found another "
            "(the first is at 9:13)",
            id="two-name-selectors",
        ),
        pytest.param(
            after_prelude(DECL, STATE, "        cm ConfigMap {", "            name="),
            "cronjob.ctrlkit:9:18: expected the object's name after 'name=', found end of line",
            id="name-without-value",
        ),
        pytest.param(
            after_prelude(DECL, STATE, JOBS, "            owned"),
            "cronjob.ctrlkit:9:18: expected '}' to close the selectors of state 'jobs' (opened at 8:20), "
            "found end of file",
            id="unclosed-selectors",
        ),
        pytest.param(
            after_prelude(DECL, "    action {", "        Sync", "    }", "}"),
            "cronjob.ctrlkit:9:5: expected '(' after action name 'Sync', found '}'",
            id="action-without-parens",
        ),
        pytest.param(
            after_prelude(DECL, "    action {", "        Sync(jobs config)"),
            "cronjob.ctrlkit:8:19: expected ',' or ')' in the arguments of 'Sync', found 'config'",
            id="arguments-without-comma",
        ),
        pytest.param(
            after_prelude(DECL, "    action {", "        Sync(jobs,)"),
            "cronjob.ctrlkit:8:19: expected a state name (letters, digits and '_'), found ')'",
            id="trailing-comma",
        ),
        pytest.param(
            after_prelude(DECL, "    action {", "        Sync()", "    }"),
            "cronjob.ctrlkit:9:6: expected '}' to close decl 'M' (opened at 6:20), found end of file",
            id="unclosed-decl",
        ),
    ],
)
def test_syntax_error_names_expected_and_found_at_their_position(text: str, expected: str) -> None:
    assert str(parse_error(text)) == expected


KNOWN_ALIASES = "(ConfigMap, CronJob, Job)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "bind v1 k8s.io/api/core/v1\nalias Job batch/v1/Job\n",
            "cronjob.ctrlkit:2:1: expected alias 'Job' to use a bound group/version (v1), found 'batch/v1'",
            id="alias-of-unbound-group-version",
        ),
        pytest.param(
            after_prelude("decl M for CronJb {", "}"),
            f"cronjob.ctrlkit:6:12: expected the kind of decl 'M' to be an alias {KNOWN_ALIASES}, "
            "found 'CronJb'",
            id="decl-for-unknown-kind",
        ),
        pytest.param(
            after_prelude(DECL, STATE, "        pods []Pod {", "        }", "    }", "}"),
            f"cronjob.ctrlkit:8:16: expected the kind of state 'pods' to be an alias {KNOWN_ALIASES}, "
            "found 'Pod'",
            id="state-of-unknown-kind",
        ),
        pytest.param(
            after_prelude(
                DECL, STATE, JOBS, "        }", "    }", "    action {", "        Sync(jobs, pods)", "}}"
            ),
            "cronjob.ctrlkit:12:20: expected action 'Sync' to take states that decl 'M' declares (jobs), "
            "found 'pods'",
            id="action-takes-undeclared-state",
        ),
        pytest.param(
            after_prelude(DECL, STATE, JOBS, "        }", "        jobs Job {", "        }", "    }", "}"),
            "cronjob.ctrlkit:10:9: expected each state of decl 'M' declared once, found 'jobs' again "
            "(first at 8:9)",
            id="duplicate-state",
        ),
        pytest.param(
            after_prelude(DECL, "    action {", "        Sync()", "        Sync()", "    }", "}"),
            "cronjob.ctrlkit:9:9: expected each action of decl 'M' declared once, found 'Sync' again "
            "(first at 8:9)",
            id="duplicate-action",
        ),
        pytest.param(
            after_prelude(
                DECL, STATE, JOBS, "        }", "    }", "    action {", "        Sync(jobs, jobs)", "}}"
            ),
            "cronjob.ctrlkit:12:20: expected each state argument of action 'Sync' declared once, "
            "found 'jobs' again (first at 12:14)",
            id="state-taken-twice",
        ),
        pytest.param(
            after_prelude("alias Job batch/v1/Job"),
            "cronjob.ctrlkit:6:1: expected each alias declared once, found 'Job' again (first at 4:1)",
            id="duplicate-alias",
        ),
        pytest.param(
            after_prelude("bind v1 example.com/core"),
            "cronjob.ctrlkit:6:1: expected each group/version declared once, found 'v1' again (first at 1:1)",
            id="duplicate-bind",
        ),
        pytest.param(
            after_prelude(DECL, "}", "decl M for Job {", "}"),
            "cronjob.ctrlkit:8:1: expected each decl declared once, found 'M' again (first at 6:1)",
            id="duplicate-decl",
        ),
    ],
)
def test_meaning_error_names_expected_and_found_at_their_position(text: str, expected: str) -> None:
    assert str(parse_error(text)) == expected


def test_every_meaning_error_is_reported_first_one_raised_in_document_order() -> None:
    error = parse_error(
        after_prelude("decl M for Nope {", STATE, "        pods []Pod {", "        }", "    }", "}")
    )

    assert (error.line, error.col) == (6, 12)
    assert [str(other) for other in error.others] == [
        f"cronjob.ctrlkit:8:16: expected the kind of state 'pods' to be an alias {KNOWN_ALIASES}, found 'Pod'"
    ]


def test_error_exposes_file_position_and_message_separately() -> None:
    error = parse_error("bind batch/v1\n")

    assert (error.filename, error.line, error.col) == ("cronjob.ctrlkit", 1, 14)
    assert error.message == "expected a package after 'bind batch/v1', found end of line"


def test_parse_file_errors_name_the_file_as_given(tmp_path: Path) -> None:
    path = tmp_path / "broken.ctrlkit"
    path.write_text("alias Job batch/v1/Job\n", encoding="utf-8")

    with pytest.raises(DSLError) as caught:
        parse_file(path)

    assert str(caught.value).startswith(f"{path}:1:1: expected alias 'Job' to use a bound group/version")


def test_empty_document_has_nothing_declared() -> None:
    document = parse("// nothing here yet\n\n", "empty.ctrlkit")

    assert (document.binds, document.aliases, document.decls) == ((), (), ())


# -- an action's states must be declared -----------------------------------------------------------------


def test_action_taking_a_state_only_another_decl_declares_is_an_error_naming_action_state_and_line() -> None:
    error = parse_error(
        after_prelude(
            "decl Lister for CronJob {",
            STATE,
            JOBS,
            "        }",
            "    }",
            "}",
            "decl Cleaner for CronJob {",
            "    action {",
            "        CleanUp(jobs)",
            "    }",
            "}",
        )
    )

    assert (error.line, error.col) == (14, 17)
    assert "action 'CleanUp'" in error.message
    assert "decl 'Cleaner' declares (none is declared)" in error.message
    assert error.message.endswith("found 'jobs'")


def test_every_undeclared_state_of_an_action_is_reported() -> None:
    error = parse_error(
        after_prelude(
            DECL, STATE, JOBS, "        }", "    }", "    action {", "        Sync(pods, jobs, cm)", "}}"
        )
    )

    reported = [(e.line, e.col, e.message.rsplit(" ", 1)[-1]) for e in (error, *error.others)]
    assert reported == [(12, 14, "'pods'"), (12, 26, "'cm'")]
    assert all("action 'Sync'" in e.message for e in (error, *error.others))


def test_a_state_declared_after_the_action_block_of_its_decl_is_declared() -> None:
    document = parse(
        after_prelude(
            DECL, "    action {", "        Sync(jobs)", "    }", STATE, JOBS, "        }", "    }", "}"
        )
    )

    (decl,) = document.decls
    assert [s.name for s in decl.actions[0].states] == [s.name for s in decl.states] == ["jobs"]


def test_code_generator_refuses_a_hand_built_document_whose_action_takes_an_undeclared_state() -> None:
    document = parse_file(FIXTURE)
    (decl,) = document.decls
    first = decl.actions[0]
    sneaked = replace(first, states=(*first.states, StateRef(line=first.line, col=99, name="pods")))
    hand_built = replace(document, decls=(replace(decl, actions=(sneaked, *decl.actions[1:])),))

    with pytest.raises(DSLError) as caught:
        generate(hand_built, "cronjob.ctrlkit")

    assert (caught.value.line, caught.value.col) == (first.line, 99)
    assert f"action '{first.name}'" in caught.value.message
    assert caught.value.message.endswith("found 'pods'")
