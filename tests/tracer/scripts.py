"""Small scripts the failure tests write and run, and the lines they are asked about."""
import textwrap


def write_script(tmp_path, name, body):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body).lstrip())
    return path


def line_of(path, needle) -> str:
    """`NAME.py:N`, the first line of the script that holds `needle`."""
    number = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if needle in text)
    return f"{path.name}:{number}"
