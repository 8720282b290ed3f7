"""The loop a page runs to follow a live answer (lib.web.live_view.follow), over real LiveAnswers, with a
fake clock: what it reads, what it sends, when it yields to Streamlit, and how it hands the end to the page."""

import dataclasses

from lib.storage.records import DONE, FAILED, Message
from lib.turn.live import SAVING, LiveAnswer
from lib.web.live_view import FIRST_TEXT_HOLD_S, POLL_S, YIELD_S, Followed, follow
from lib.web.stream_render import render_markdown
from tests.long_answers import long_answer
from tests.test_stream_render import Recorder, Slot

MESSAGE = Message(
    message_id="01JDEMO0000000000000000000",
    session_id="s1",
    create_time="2026-11-30T00:00:00Z",
    input_body="q",
    system_prompt_id="default-v1",
)


class Status(Slot):
    """The status placeholder: also takes the warning the loop draws while a save is retried."""

    def warning(self, text, icon=None):
        self._add("warning", text)


class Clock:
    """Time that passes only when the loop sleeps; `each_sleep` runs the worker's side meanwhile."""

    def __init__(self, each_sleep):
        self.now, self.sleeps, self.each_sleep = 0.0, 0, each_sleep

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds
        self.sleeps += 1
        self.each_sleep(self.now)


def followed(live, every=POLL_S):
    return Followed(MESSAGE, lambda: live, every, Recorder(), Status(Recorder().log), line="streaming")


def run(items, worker):
    clock, beat = Clock(worker), Slot()
    follow(items, beat=beat, clock=clock, sleep=clock.sleep)
    return clock, beat


def a_worker(live, text, *, chars_per_s=4_000, end=lambda live, text: live.finish(saved(text))):
    """Appends `text` at a pace, then ends the turn with `end`."""

    def step(now):
        if live.saved is None:
            sent = len(live.text)
            upto = min(len(text), int(now * chars_per_s))
            if upto > sent:
                live.append(text[sent:upto])
            elif upto == len(text):
                end(live, text)

    return step


def saved(text, status=DONE, error=None):
    return dataclasses.replace(MESSAGE, status=status, output_body=text, error=error)


def test_an_answer_is_followed_to_the_end_each_block_sent_once_and_finished_in_place():
    live, text = LiveAnswer("u", "s1", MESSAGE.message_id), long_answer(100_000)
    item = followed(live)
    clock, beat = run([item], a_worker(live, text))
    assert item.ended is live and item.in_place and not item.gone
    whole = Recorder()
    render_markdown(whole, text)
    assert item.body.shown() == whole.shown()  # the same elements as a reopened chat
    assert item.body.log["sent"] <= 3 * len(text)  # each finished block once; the open one a few times
    # a Streamlit call (a draw or the beat) between any two sleeps; draws coalesced to at most one per read
    assert item.body.log["draws"] + beat.log.get("yields", 0) >= clock.sleeps
    assert item.body.log["draws"] <= clock.now / POLL_S + len(whole.shown()) + 2


def test_while_the_model_is_silent_nothing_is_sent_but_the_run_still_yields():
    live = LiveAnswer("u", "s1", MESSAGE.message_id)
    live.append("Thinking about it")
    item = followed(live)
    silence = 5.0

    def worker(now):
        if now > silence:
            live.finish(saved(live.text))

    clock, beat = run([item], worker)
    assert item.body.log["sent"] == 2 * len("Thinking about it")  # drawn open, then once more as finished
    assert beat.log["yields"] >= silence / YIELD_S - 2  # an empty placeholder: a Streamlit call, no text


def test_stopping_and_a_save_being_retried_are_shown_under_the_answer():
    live = LiveAnswer("u", "s1", MESSAGE.message_id)
    item = followed(live)
    lines = []

    def worker(now):
        if now < 1:
            live.append("partial ")
        elif now < 2:
            live.request_stop("Stopped before the answer was complete.")
        elif now < 3:
            live.status, live.save_error = SAVING, "The database is busy."
        else:
            live.finish(saved(live.text, FAILED, "Stopped before the answer was complete."))
        shown = item.status.shown()
        if shown and (not lines or lines[-1] != shown[-1][1]):
            lines.append(shown[-1][1])

    run([item], worker)
    assert lines == [
        ":material/hourglass_top: Stopping…",
        "Shown but not saved yet: The database is busy. Saving is retried every few seconds.",
    ]
    assert item.in_place and item.ended.saved.status == FAILED


def test_a_saved_answer_cut_to_fit_its_item_is_not_finished_in_place():
    live, text = LiveAnswer("u", "s1", MESSAGE.message_id), long_answer(20_000)
    item = followed(live)
    run([item], a_worker(live, text, end=lambda live, text: live.finish(saved(text[:5_000]))))
    assert item.ended is live and not item.in_place  # the page reruns and draws the stored text


def test_an_answer_the_hot_tier_lost_ends_the_loop_as_gone():
    item = Followed(MESSAGE, lambda: None, POLL_S, Recorder(), Status(), line="streaming")
    run([item], lambda now: None)
    assert item.gone and item.ended is None and item.body.log["sent"] == 0


def test_two_answers_are_followed_at_once():
    first, second = LiveAnswer("u", "s1", "a" * 26), LiveAnswer("u", "s2", "b" * 26)
    one, two = followed(first), followed(second)
    text = long_answer(5_000)
    worker_one, worker_two = a_worker(first, text), a_worker(second, text, chars_per_s=1_000)
    handed = []  # (which, when, whether the other answer was still being written)
    clock = Clock(lambda now: (worker_one(now), worker_two(now)))
    follow(
        [one, two],
        ended=lambda f: handed.append((f, clock(), second.saved is None)),
        beat=Slot(),
        clock=clock,
        sleep=clock.sleep,
    )
    assert one.ended is first and two.ended is second
    assert one.body.shown() == two.body.shown()
    # each is handed to the page (its footer drawn) as soon as it is saved, not when both are
    assert [(f, waiting) for f, _, waiting in handed] == [(one, True), (two, False)]
    assert handed[0][1] < len(text) / 1_000 <= handed[1][1]  # the first before the second could have ended


def test_this_process_s_answer_is_read_every_tenth_of_a_second_the_hot_tier_s_every_poll():
    for every in (YIELD_S, POLL_S):
        live, reads = LiveAnswer("u", "s1", MESSAGE.message_id), []
        item = followed(live, every)
        item.source = lambda reads=reads, live=live: reads.append(1) or live
        clock, _ = run([item], a_worker(live, long_answer(2_000), chars_per_s=1_000))
        assert abs(len(reads) - clock.now / every) <= 2  # a Redis round trip with the text costs more


def test_an_answer_whose_worker_ended_without_saving_ends_the_loop_as_gone():
    live = LiveAnswer("u", "s1", MESSAGE.message_id)
    item = followed(live)

    def worker(now):
        if now < 1:
            live.append("partial ")
        else:
            live.status, live.save_error = SAVING, "The database is busy."
            live.done()  # the worker gave up saving: nothing will change this answer again

    run([item], worker)
    assert live.given_up and item.gone and item.ended is None


def test_a_local_answer_saved_during_a_nap_is_shown_saved_without_waiting_out_the_nap():
    live = LiveAnswer("u", "s1", MESSAGE.message_id)
    live.append("almost done")
    item, naps = followed(live, YIELD_S), []

    def wake(seconds, **how):  # the worker saves while the page naps: the nap ends at once
        naps.append(seconds)
        live.finish(saved(live.text))
        return live.wait_ended(seconds, **how)

    item.wake = wake
    clock, _ = run([item], lambda now: None)
    assert item.ended is live and item.in_place
    assert naps == [YIELD_S] and clock.sleeps == 0  # one nap, cut short; the fake clock never slept


def test_the_first_text_ends_the_nap_of_a_page_that_has_drawn_nothing():
    live = LiveAnswer("u", "s1", MESSAGE.message_id)
    item, naps = followed(live, YIELD_S), []

    def wake(seconds, **how):  # the first chunk arrives while the page naps: it is drawn at once
        naps.append(how)
        if len(naps) == 1:
            live.append("Hello")
        elif len(naps) == 2:
            live.finish(saved(live.text))
        return live.wait_ended(seconds, **how)

    item.wake = wake
    clock, _ = run([item], lambda now: None)
    assert item.ended is live and item.in_place
    # the first nap waits for text, the second (text drawn) for the end; neither waited out its beat
    assert naps == [{"first_text": True}, {"first_text": False}] and clock.sleeps == 0


def test_a_page_waiting_for_a_first_text_lets_go_after_its_wait_and_keeps_what_it_drew():
    live = LiveAnswer("u", "s1", MESSAGE.message_id)
    item = followed(live, YIELD_S)
    clock = Clock(lambda now: None)
    follow([item], beat=Slot(), clock=clock, sleep=clock.sleep, first_text=1.0)
    assert item.ended is None and not item.gone and len(item.paced) == 0  # a silent model: let go, not waited out
    assert 1.0 <= clock.now < 1.0 + 2 * YIELD_S  # the fake clock: one second of naps, no more
    live.append("Hello")
    live.finish(saved("Hello"))
    follow([item], beat=Slot(), clock=clock, sleep=clock.sleep)  # the rest of the page follows it on
    assert item.ended is live and item.in_place


def test_a_page_waiting_for_a_first_text_holds_it_until_the_next_words_are_drawn():
    """A send's page lets go of its answer FIRST_TEXT_HOLD_S after the first words, not at them: the words that
    follow at once are drawn (the renderer's next redraw) before the page sends the turns above again."""
    live = LiveAnswer("u", "s1", MESSAGE.message_id)
    live.append("Let's ")  # the first chunk is there at the first read

    def worker(now):
        if now >= 0.05 and len(live.text) == len("Let's "):
            live.append("break this down.")

    item = followed(live, YIELD_S)
    clock = Clock(worker)
    follow([item], beat=Slot(), clock=clock, sleep=clock.sleep, first_text=1.0)
    assert item.ended is None and not item.gone  # still being written: the page follows it on after the turns
    assert FIRST_TEXT_HOLD_S <= clock.now < FIRST_TEXT_HOLD_S + 2 * YIELD_S  # held, then let go, before the 1 s
    assert item.body.shown() == [("markdown", "Let's break this down.", None)]  # the next words drawn too
