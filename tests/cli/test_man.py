#!/usr/bin/env python3
"""The man page (doc/s2c.1) against the program: every command `s2c --help`
lists has a section under COMMANDS, every option a command's `--help` lists
appears in that command's section, and the global options in the page; groff
(when installed) formats the page without warnings.

  test_man.py S2C_BINARY MAN_PAGE
"""
import re
import shutil
import subprocess
import sys

OPTION = re.compile(r"(?<![\w-])--?[A-Za-z][A-Za-z0-9-]*")


def s2c(binary, *args):
    p = subprocess.run([binary, *args], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise SystemExit(f"s2c {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p.stdout


def help_commands(text):
    """The command names of `s2c --help` (its "commands:" block)."""
    block = text.split("commands:", 1)[1].split("\n\n", 1)[0]
    return [line.split()[0] for line in block.splitlines() if line.strip()]


def help_options(text):
    """Every option named on the option lines of a command's help."""
    return {o for line in text.splitlines() if line.lstrip().startswith("-") for o in OPTION.findall(line)}


def plain(troff):
    """The page's text with the escapes this page uses removed (\\- -> -)."""
    text = re.sub(r"\\f[BIRP]", "", troff).replace("\\-", "-").replace("\\&", "").replace("\\e", "\\")
    return "\n".join(l for l in text.splitlines() if not l.startswith('.\\"'))


def sections(text, level):
    """{title: body} of the page's sections of `level` (SH or SS); an .SH
    also ends an .SS section."""
    out, title = {}, None
    for line in text.splitlines():
        m = re.match(r"\.(SH|SS)\s+(.*)", line)
        if m and m.group(1) == level:
            title = m.group(2).strip('"')
            out[title] = ""
        elif m and m.group(1) == "SH":
            title = None
        elif title is not None:
            out[title] += line + "\n"
    return out


def main():
    binary, page = sys.argv[1], sys.argv[2]
    text = plain(open(page, encoding="utf-8").read())
    failures = []
    commands = help_commands(s2c(binary, "--help"))
    if len(commands) < 5:
        failures.append(f"s2c --help lists {commands}: the commands block was not read")
    documented = sections(text, "SS")   # the page's only subsections are its commands
    for cmd in commands:
        if cmd not in documented:
            failures.append(f"command {cmd}: no '.SS {cmd}' under COMMANDS")
            continue
        opts = help_options(s2c(binary, cmd, "--help"))
        if not opts:
            failures.append(f"s2c {cmd} --help: no options read")
        have = set(OPTION.findall(documented[cmd]))
        for o in sorted(opts - have):
            failures.append(f"command {cmd}: option {o} is not in its section")
    for o in ("--help", "--version"):
        if o not in OPTION.findall(sections(text, "SH").get("OPTIONS", "")):
            failures.append(f"global option {o} is not under OPTIONS")
    if shutil.which("groff"):
        r = subprocess.run(["groff", "-man", "-ww", "-z", "-Tutf8", page], capture_output=True, text=True)
        if r.returncode != 0 or r.stderr.strip():
            failures.append(f"groff warns: {r.stderr.strip()}")
    else:
        print("groff not found: the page's formatting was not checked")
    for f in failures:
        print("FAIL:", f)
    if not failures:
        print(f"man page: {len(commands)} commands ({', '.join(commands)}) and their options documented")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
