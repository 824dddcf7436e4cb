"""step_check.py's comparison of the ranks and the report's "differs between ranks" part, without a process
group (fast): the parameters some ranks' own backward left without a gradient, hand-derived from small rank
tables."""
from gradflow.integrations.step_check import StepCheck, describe, divergent, gather_reasons, rank_and_world
from tests.integrations.plain_models import Net
from tests.integrations.test_step_check import steps


def test_divergent_names_the_ranks_whose_own_backward_gave_none():
    every = [["aux.bias", "aux.weight", "old.w"], ["old.w"], ["aux.weight", "old.w"]]
    assert divergent(every) == {"aux.bias": [0], "aux.weight": [0, 2]}  # old.w: none on every rank, not divergent
    assert divergent([["a"], ["a"]]) == {} and divergent([[], []]) == {}
    assert divergent([[]]) == {}


def test_outside_a_process_group_nothing_is_gathered():
    assert rank_and_world() == (0, 1)
    assert gather_reasons({"aux.weight": "not used"}) == [{"aux.weight": "not used"}]
    (found,) = steps(Net("unused"), StepCheck())
    assert found.rank == 0 and found.divergent == {}
    assert found.ranks_own == [{"aux.weight": found.own["aux.weight"], "aux.bias": found.own["aux.bias"]}]
    assert "differs between ranks" not in describe(found)


def test_the_report_names_what_differs_and_why():
    (found,) = steps(Net("fine"), StepCheck())
    found.ranks_own = [{}, {"head.bias": "not used in the forward"}]  # as gathered from a 2-rank job
    found.divergent = divergent([sorted(own) for own in found.ranks_own])
    assert describe(found).splitlines() == [
        "gradflow: step 1: every trainable parameter got a gradient (4 tensors); 1 differ between ranks",
        "  differs between ranks (each rank's own backward; the gradient sync then fills .grad in on every rank):",
        "    head.bias  no gradient on rank 1: not used in the forward"]
