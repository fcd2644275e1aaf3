"""Templates are data; the generator never writes outside its output folder."""

from __future__ import annotations

import ast
import json
import re
import shutil
import string
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ge_python_backend.errors import ConfigError
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.repository.templates import ENV_TEMPLATE_PATH, available_templates, load_template


def _files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


@pytest.fixture
def sandbox(tmp_path, onnx_dir):
    """tmp/out is the output folder; tmp itself must stay as it was apart from it."""
    (tmp_path / "out").mkdir()
    return tmp_path


def _template(root, name, files, options=None, body="class TritonPythonModel: pass\n"):
    folder = root / "templates" / name
    folder.mkdir(parents=True)
    (folder / "model.py.in").write_text(body)
    (folder / "template.json").write_text(json.dumps({"description": name, "options": options or {}, "files": files}))
    return folder


@pytest.mark.parametrize("name", ["../evil", "a/b", "/abs", "..", ".", ".hidden", "-x", "a\\b"])
def test_unsafe_model_names_are_refused(sandbox, onnx_dir, name):
    before = _files(sandbox)
    with pytest.raises(ConfigError, match="not safe as a folder name"):
        generate(onnx_dir / "linear.onnx", sandbox / "out", GenerateOptions(name=name))
    assert _files(sandbox) == before


@pytest.mark.parametrize(
    "name, message",
    [
        ("", r"model name is empty \(--name ''\); give a name"),
        ("x" * 300, r"model name 'xxxxxxxxxxxxxxxxxxxx'... is 300 characters long; at most 128"),
    ],
)
def test_empty_and_overlong_names_say_so(sandbox, onnx_dir, name, message):
    """Finding: --name '' fell back to the default; a 300-character name got the "unsafe characters" message."""
    before = _files(sandbox)
    with pytest.raises(ConfigError, match=message):
        generate(onnx_dir / "linear.onnx", sandbox / "out", GenerateOptions(name=name))
    assert _files(sandbox) == before


@pytest.mark.parametrize(
    "files, message",
    [
        ({"../escape.py": "model.py.in"}, "target '../escape.py' would leave the model folder"),
        ({"{version}/../../escape.py": "model.py.in"}, "would leave the model folder"),
        ({"/tmp/escape.py": "model.py.in"}, "target '/tmp/escape.py' would leave the model folder"),
        ({"{version}/model.py": "../../../etc/passwd"}, "would leave the folder"),
        ({"{version}/model.py": "missing.in"}, "source 'missing.in' is not a file"),
        ({"{version}/labels.txt": "@labels"}, "'@labels' copies no file option"),
    ],
)
def test_template_paths_that_escape_are_refused_before_writing(sandbox, onnx_dir, monkeypatch, files, message):
    _template(sandbox, "bad", files)
    monkeypatch.setenv(ENV_TEMPLATE_PATH, str(sandbox / "templates"))
    before = _files(sandbox)
    with pytest.raises(ConfigError, match=message):
        generate(onnx_dir / "linear.onnx", sandbox / "out", GenerateOptions(name="m", template="bad"))
    assert _files(sandbox) == before


def test_a_symlinked_model_folder_pointing_outside_is_refused(sandbox, onnx_dir):
    outside = sandbox / "elsewhere"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    (sandbox / "out" / "m").symlink_to(outside)
    with pytest.raises(ConfigError, match="would leave the folder"):
        generate(onnx_dir / "linear.onnx", sandbox / "out", GenerateOptions(name="m", overwrite=True))
    assert (outside / "keep.txt").read_text() == "keep"


def test_a_template_added_as_data_is_listed_and_rendered(sandbox, onnx_dir, monkeypatch):
    options = {"greeting": {"default": "hello", "help": "a word"}, "notes": {"file": True, "help": "a file"}}
    _template(
        sandbox,
        "mine",
        {"{version}/model.py": "model.py.in", "{version}/extra/notes.txt": "@notes"},
        options,
        body='"""${greeting} from ${name} (${model_file})"""\n\n\nclass TritonPythonModel:\n    pass\n',
    )
    monkeypatch.setenv(ENV_TEMPLATE_PATH, str(sandbox / "templates"))
    notes = sandbox / "notes.txt"
    notes.write_text("some notes")
    assert "mine" in available_templates()
    folder = generate(
        onnx_dir / "linear.onnx",
        sandbox / "out",
        GenerateOptions(name="m", template="mine", template_options={"notes": str(notes)}),
    ).model_dir
    assert (folder / "1" / "model.py").read_text().startswith('"""hello from m (model.onnx)"""\n')
    assert (folder / "1" / "extra" / "notes.txt").read_text() == "some notes"


@pytest.mark.parametrize(
    "given, message",
    [
        ({"labels": "LABELS", "top_k": "0"}, "option 'top_k' is '0'; expected an integer >= 1"),
        ({"labels": "LABELS", "top_k": "five"}, "option 'top_k' is 'five'; expected an integer >= 1"),
        ({"labels": "LABELS", "softmax": "maybe"}, "option 'softmax' is 'maybe'; expected true or false"),
        ({"labels": "LABELS", "mean": "0.5,x"}, "option 'mean' is '0.5,x'; expected comma-separated numbers"),
        ({"labels": "/no/such/labels.txt"}, "option 'labels': file /no/such/labels.txt does not exist"),
        ({}, "needs option 'labels' \\(--set labels=...\\)"),
        ({"labels": "LABELS", "colour": "red"}, "has no option 'colour'; its options: labels, max_input_bytes"),
    ],
)
def test_classification_options_are_checked(sandbox, given, message):
    labels = sandbox / "labels.txt"
    labels.write_text("a\nb\n")
    given = {k: (str(labels) if v == "LABELS" else v) for k, v in given.items()}
    with pytest.raises(ConfigError, match=message):
        load_template("classification").values(given)


def test_unknown_option_type_is_refused(sandbox, monkeypatch):
    _template(sandbox, "typed", {"{version}/model.py": "model.py.in"}, {"n": {"default": "1", "type": "integer"}})
    monkeypatch.setenv(ENV_TEMPLATE_PATH, str(sandbox / "templates"))
    accepted = "string, int, float, int_list, float_list, bool"
    with pytest.raises(ConfigError, match=f"option 'n' has type 'integer'; accepted: {accepted}"):
        load_template("typed")


# -- values rendered for the language they land in ----------------------------------------------------

#: The file name of the finding: on 3b633e5 it closed model.py's docstring and ran code on import.
HOSTILE_NAME = 'x"""\nimport os; open("PWNED", "w").write("1")\n""".onnx'


def test_a_model_file_name_never_becomes_code_in_model_py(sandbox, onnx_dir):
    hostile = sandbox / HOSTILE_NAME
    shutil.copyfile(onnx_dir / "linear.onnx", hostile)
    folder = generate(hostile, sandbox / "out", GenerateOptions(name="m")).model_dir
    model_py = folder / "1" / "model.py"
    assert HOSTILE_NAME in ast.get_docstring(ast.parse(model_py.read_text()), clean=False)  # the name, as it is
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import runpy; from ge_python_backend.testing import install_fake_pb_utils; install_fake_pb_utils(); "
            f"runpy.run_path({str(model_py)!r})",
        ],
        cwd=sandbox,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert not (sandbox / "PWNED").exists()


def _template_code(template: str) -> str:
    return (load_template(template).folder / "model.py.in").read_text()


_HOSTILE_CHARACTERS = st.one_of(
    st.sampled_from(['"', "'", "\\", "\n", "\r", "\t", "\x00", "\x0b", "\x0c", "\x1b", "\x85", "\u2028", "\udcff"]),
    st.sampled_from(['"""', "'''", "${name}", "$$", "{", "}", "#", "\\N{", "\\x", "\\u", "\\"]),
    st.characters(),
)


@settings(max_examples=300, deadline=None)
@given(
    source=st.lists(_HOSTILE_CHARACTERS, max_size=40).map("".join),
    template=st.sampled_from(["generic", "classification"]),
)
def test_any_file_name_is_text_in_the_rendered_model_py_never_code(source, template):
    """The rendered model.py parses to the template's own code (its AST with the strings blanked),
    and its docstring holds the name exactly as given."""
    text = _template_code(template)
    values = {"name": "m", "source": source, "model_file": "model.onnx"}
    rendered = load_template(template).render_python(text, values, "model.py.in")
    expected = ast.parse(string.Template(text).substitute(name="m", source="S", model_file="model.onnx"))
    tree = ast.parse(rendered)
    for node in (*ast.walk(expected), *ast.walk(tree)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = ""
    assert ast.dump(tree) == ast.dump(expected)
    assert f"from {source}" in ast.get_docstring(ast.parse(rendered), clean=False)


@pytest.mark.parametrize(
    "body, where",
    [
        ("TOP_K = ${top_k}\n", "line 1: placeholder ${top_k} must sit in a plain string literal or a comment"),
        ('NAME = f"${name}"\n', "line 1: placeholder ${name} must sit"),
        ('NAME = b"${name}"\n', "line 1: placeholder ${name} must sit"),
        ('NAME = r"${name}"\n', "line 1: placeholder ${name} must sit"),
        ('"""ok: ${name}"""\nclass ${name}:\n    pass\n', "line 2: placeholder ${name} must sit"),
    ],
)
def test_a_template_with_a_placeholder_in_code_is_refused_when_it_loads(sandbox, monkeypatch, body, where):
    _template(sandbox, "coded", {"{version}/model.py": "model.py.in"}, {"top_k": {"default": "5"}}, body=body)
    monkeypatch.setenv(ENV_TEMPLATE_PATH, str(sandbox / "templates"))
    with pytest.raises(ConfigError, match=re.escape(f"template 'coded', model.py.in {where}")):
        load_template("coded")


def test_placeholders_in_comments_and_u_strings_are_rendered_as_text(sandbox, monkeypatch):
    body = '# model ${name} from ${source}\nNAME = u"${source}"\n'
    _template(sandbox, "plain", {"{version}/model.py": "model.py.in"}, body=body)
    monkeypatch.setenv(ENV_TEMPLATE_PATH, str(sandbox / "templates"))
    rendered = load_template("plain").render_python(body, {"name": "m", "source": 'a"\nb'}, "model.py.in")
    namespace: dict = {}
    exec(compile(rendered, "model.py", "exec"), namespace)
    assert namespace["NAME"] == 'a"\nb' and rendered.count("\n") == 2


def test_a_control_character_in_a_value_for_a_text_file_is_refused(sandbox, onnx_dir, monkeypatch):
    _template(sandbox, "noted", {"{version}/model.py": "model.py.in", "{version}/NOTES.txt": "notes.in"})
    (sandbox / "templates" / "noted" / "notes.in").write_text("made from ${source}\n")
    monkeypatch.setenv(ENV_TEMPLATE_PATH, str(sandbox / "templates"))
    hostile = sandbox / "two\nlines.onnx"
    shutil.copyfile(onnx_dir / "linear.onnx", hostile)
    with pytest.raises(ConfigError, match=r"the value of \$\{source\} holds the control character U\+000A"):
        generate(hostile, sandbox / "out", GenerateOptions(name="m", template="noted"))
