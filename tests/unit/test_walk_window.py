"""walk_window: which tokens one fixed-shape replay pass commits."""

from nmt_specdec.decoding.replay.determinism import _common_prefix, walk_window

EOS = 2


def test_all_inputs_match_completes_the_window():
    # inputs: committed 5 at index 0, proposed 6, 7, 8; predictions agree throughout.
    walk = walk_window(preds=[6, 7, 8, 9], scores=[-.1, -.2, -.3, -.4],
                       inputs=[5, 6, 7, 8], first=0, eos=EOS)
    assert walk.tokens == [6, 7, 8, 9]
    assert walk.scores == [-.1, -.2, -.3, -.4]
    assert walk.window_complete and not walk.finished


def test_first_mismatch_commits_the_replay_token_and_stops():
    walk = walk_window(preds=[6, 4, 8, 9], scores=[0.0] * 4, inputs=[5, 6, 7, 8], first=0, eos=EOS)
    assert walk.tokens == [6, 4]  # 7 was proposed, the replay says 4
    assert not walk.window_complete and not walk.finished


def test_starts_after_the_last_committed_input():
    walk = walk_window(preds=[1, 1, 7, 3], scores=[0.0] * 4, inputs=[5, 6, 7, 0], first=1, eos=EOS)
    assert walk.tokens == [1]  # prediction after input 6 is 1, but 7 was proposed


def test_eos_finishes_even_when_proposal_goes_on():
    walk = walk_window(preds=[6, EOS, 8, 9], scores=[0.0] * 4, inputs=[5, 6, EOS, 8], first=0,
                       eos=EOS)
    assert walk.tokens == [6, EOS] and walk.finished and not walk.window_complete


def test_last_position_of_window_always_completes():
    walk = walk_window(preds=[0, 0, 0, 9], scores=[0.0] * 4, inputs=[1, 1, 1, 1], first=3, eos=EOS)
    assert walk.tokens == [9] and walk.window_complete


def test_common_prefix():
    assert _common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert _common_prefix([], [1]) == 0
    assert _common_prefix([1, 2], [1, 2, 3]) == 2
