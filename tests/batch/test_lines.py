"""Batch input: one bad line never ends the batch; files and stdin are read the same way; lines are bounded.

Expected grads are hand-derived (d(x*k)/dx = k), never torch against gradflow.
"""
import io
import json

import pytest

from gradflow.batch import lines as batch_lines
from gradflow.batch import records as batch_records
from gradflow.batch import run_batch
from gradflow.batch.lines import read_lines
from gradflow.errors import LimitError
from gradflow.limits import LINE_SKIP_FACTOR, MAX_JSON_DEPTH


def _records(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines()]


def _summary(recs: list[dict]) -> list[tuple]:
    return [(r["id"], r["line"], r["grads"], r["error"] and r["error"]["kind"]) for r in recs]


# ---- 1. one line's exception is that line's record -----------------------------------------------------

@pytest.mark.parametrize("deep", ["[" * 1000 + "]" * 1000, '{"a": ' * 1000 + "1" + "}" * 1000,
                                  '{"expr": "x", "vars": {"x": ' + "[" * 5000 + "]" * 5000 + "}}"])
def test_a_deeply_nested_line_gets_its_own_record_and_the_rest_run(deep):
    recs = list(run_batch(['"x*2"', deep, '"x*3"'], values={"x": 1}))
    assert _summary(recs) == [(1, 1, {"x": 2.0}, None), (2, 2, {}, "bad_json"), (3, 3, {"x": 3.0}, None)]
    assert "levels deep" in recs[1]["error"]["message"] and f"at most {MAX_JSON_DEPTH}" in recs[1]["error"]["message"]


def test_nesting_is_counted_outside_strings_only():
    brackets = "[" * 3000  # inside a string: text, not nesting
    (rec,) = run_batch([json.dumps({"expr": "x*4", "vars": {"x": 1}, "id": brackets})])
    assert rec["grads"] == {"x": 4.0} and rec["id"] == brackets
    assert batch_lines.json_depth('{"a": "[[[[", "b": [[1]]}') == 3


def test_a_value_nested_past_its_own_limit_still_gets_the_value_message():
    value = "[" * 40 + "1" + "]" * 40  # deeper than a value may be (32), within what a line may nest (64)
    (rec,) = run_batch(['{"expr": "sum(x)", "vars": {"x": ' + value + "}}"])
    assert rec["error"]["kind"] == "bad_value" and "40 deep" in rec["error"]["message"]


@pytest.mark.parametrize("stage", ["read_job", "evaluate_job"])
def test_any_exception_from_one_line_becomes_its_record(monkeypatch, stage):
    real = getattr(batch_records, stage)

    def flaky(*args, **kw):
        if "boom" in str(args):
            raise RecursionError("deep inside")
        return real(*args, **kw)

    monkeypatch.setattr(batch_records, stage, flaky)
    recs = list(run_batch(['"x*2"', '"x*boom"', '"x*3"'], values={"x": 1}))
    assert _summary(recs) == [(1, 1, {"x": 2.0}, None), (2, 2, {}, "internal"), (3, 3, {"x": 3.0}, None)]
    assert "RecursionError: deep inside" in recs[1]["error"]["message"]
    with pytest.raises(RecursionError):  # --debug: the traceback, as for every other bug
        list(run_batch(['"x*boom"'], values={"x": 1}, debug=True))


def test_cli_nested_line_does_not_end_the_batch(cli, tmp_path):
    f = tmp_path / "deep.jsonl"
    f.write_text('"x*2"\n' + "[" * 1000 + "]" * 1000 + '\n"x*3"\n')
    res = cli("batch", str(f), "--x", "1")
    assert res.exit_code == 4 and res.stderr.strip() == "1 of 3 lines failed"
    assert _summary(_records(res.stdout)) == [(1, 1, {"x": 2.0}, None), (2, 2, {}, "bad_json"),
                                              (3, 3, {"x": 3.0}, None)]


def test_a_key_given_twice_is_an_error_not_the_last_value():
    recs = list(run_batch(['{"expr": "x*2", "vars": {"x": 1, "x": 5}}', '{"id": 1, "id": 2, "expr": "x"}']))
    assert [r["error"]["kind"] for r in recs] == ["bad_record", "bad_record"]
    assert '"x" is given twice' in recs[0]["error"]["message"] and '"id"' in recs[1]["error"]["message"]


# ---- 2. files and stdin: one reader -------------------------------------------------------------------

BAD_UTF8 = b'"x*2"\n"x\xff*5"\n"x*3"\n'


def test_invalid_utf8_is_one_line_error_in_a_file_and_on_stdin_alike(cli, tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_bytes(BAD_UTF8)
    from_file = cli("batch", str(f), "--x", "1")
    from_stdin = cli("batch", "--x", "1", input=BAD_UTF8)
    assert from_file.exit_code == from_stdin.exit_code == 4
    assert from_file.stdout == from_stdin.stdout
    recs = _records(from_file.stdout)
    assert _summary(recs) == [(1, 1, {"x": 2.0}, None), (2, 2, {}, "bad_text"), (3, 3, {"x": 3.0}, None)]
    assert recs[1]["error"]["message"].startswith("line 2 is not UTF-8 text: byte 0xff at byte 3")


@pytest.mark.parametrize("text", [False, True])
def test_a_bare_cr_stays_inside_its_line_and_crlf_ends_one(cli, tmp_path, text):
    lines = [b"x*2", b"x*3", b"x*4"] if text else [b'"x*2"', b'"x*3"', b'"x*4"']
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(b"\r\n".join(lines) + b"\r\n")
    bare = tmp_path / "cr.txt"
    bare.write_bytes(lines[0] + b"\n" + lines[1][:2] + b"\r" + lines[1][2:] + b"\n" + lines[2] + b"\n")
    opts = ["--text"] if text else []
    res = cli("batch", str(crlf), "--x", "1", *opts)
    assert [(r["line"], r["grads"]) for r in _records(res.stdout)] == [(1, {"x": 2.0}), (2, {"x": 3.0}),
                                                                      (3, {"x": 4.0})]
    for res in (cli("batch", str(bare), "--x", "1", *opts), cli("batch", "--x", "1", *opts, input=bare.read_bytes())):
        recs = _records(res.stdout)
        assert [r["line"] for r in recs] == [1, 2, 3]  # the \r did not split line 2
        assert recs[0]["grads"] == {"x": 2.0} and recs[2]["grads"] == {"x": 4.0}
        # one line: in a program \r is a space (x*\r3 is x*3); inside a JSON string it is a raw control character
        assert recs[1]["grads"] == {"x": 3.0} if text else recs[1]["error"]["kind"] == "bad_json"


def test_a_byte_order_mark_before_line_1_is_skipped(cli, tmp_path):
    f = tmp_path / "bom.jsonl"
    f.write_bytes(b'\xef\xbb\xbf"x*2"\n"x*3"\n')
    for res in (cli("batch", str(f), "--x", "1"), cli("batch", "--x", "1", input=f.read_bytes())):
        assert res.exit_code == 0, res.stdout
        assert [r["grads"] for r in _records(res.stdout)] == [{"x": 2.0}, {"x": 3.0}]
    assert [r["grads"] for r in run_batch(["\ufeffx*5"], text=True, values={"x": 1})] == [{"x": 5.0}]


def test_a_directory_is_a_clear_error(cli, tmp_path):
    res = cli("batch", str(tmp_path))
    assert res.exit_code == 2 and "is a directory" in res.stderr and "Traceback" not in res.stderr


# ---- 3. lines are bounded ------------------------------------------------------------------------------

class _Counting(io.BytesIO):
    """A stream that remembers the largest read asked of it."""

    largest = 0

    def readline(self, size=-1):
        assert size > 0, "an unbounded readline would hold a whole over-long line"
        self.largest = max(self.largest, size)
        return super().readline(size)


def test_an_over_long_line_is_an_error_record_and_is_never_held_whole():
    stream = _Counting(b'"x*2"\n"' + b"x" * 5000 + b'"\n"x*3"\n')
    items = list(read_lines(stream, limit=100))
    assert items[0] == '"x*2"' and items[2] == '"x*3"'
    assert isinstance(items[1], LimitError) and items[1].kind == "limit_line"
    assert str(items[1]).startswith("line 2 has more than 100 bytes; the limit is 100\nhint: raise it with "
                                    "--limit line=1000")
    assert stream.largest <= 1 << 16  # read in bounded pieces, never the whole 5,000-byte line
    recs = list(run_batch(read_lines(io.BytesIO(stream.getvalue()), limit=100), values={"x": 1}))
    assert _summary(recs) == [(1, 1, {"x": 2.0}, None), (2, 2, {}, "limit_line"), (3, 3, {"x": 3.0}, None)]


def test_a_line_exactly_at_the_limit_is_read_and_crlf_does_not_count():
    line = b'"' + b"x" * 98 + b'"'  # 100 bytes
    assert list(read_lines(io.BytesIO(line + b"\r\n" + line), limit=100)) == [line.decode()] * 2


class _Endless(io.RawIOBase):
    """/dev/zero as a stream, counting what was read."""

    served = 0

    def readable(self):
        return True

    def readinto(self, buf):
        buf[:] = bytes(len(buf))
        self.served += len(buf)
        return len(buf)


def test_a_line_that_never_ends_stops_the_batch_after_a_bounded_read():
    stream = _Endless()
    with pytest.raises(LimitError, match="runs on for more than 100,000 bytes without a line break"):
        list(read_lines(io.BufferedReader(stream), limit=1000))
    assert stream.served < (LINE_SKIP_FACTOR + 1) * 1000 + 2 * (1 << 16)


def test_cli_line_limit_is_a_limit_like_the_others(cli, tmp_path):
    f = tmp_path / "long.jsonl"
    f.write_text('"x*2"\n"' + "x*1+" * 10 + 'x"\n')  # line 2: 43 bytes
    res = cli("batch", str(f), "--x", "1", "--limit", "line=20")
    assert res.exit_code == 4
    recs = _records(res.stdout)
    assert recs[0]["grads"] == {"x": 2.0} and recs[1]["error"]["kind"] == "limit_line"
    assert cli("batch", str(f), "--x", "1", "--limit", "line=1e2").exit_code == 0
