#!/usr/bin/env python3
"""The build commands the mutation check (mutants.sh) reruns, read from a
CMake build directory (Makefile generator) rather than written by hand:

  mutant_commands.py member BUILD SOURCE
      the name of SOURCE's object inside BUILD's libxtgrad.a
  mutant_commands.py compile BUILD SOURCE COPY OBJECT
      SOURCE's compile command from BUILD/compile_commands.json, compiling
      COPY (a mutated copy of SOURCE, elsewhere) into OBJECT instead; quoted
      includes still resolve from SOURCE's folder (-iquote), the dependency
      file flags are dropped (nothing is written into BUILD), and the build's
      compiler launcher (ccache) is kept
  mutant_commands.py link BUILD TARGET LIBRARY EXECUTABLE
      the link command of the executable TARGET (its link.txt), linking
      LIBRARY in place of BUILD's libxtgrad.a into EXECUTABLE

compile and link print the folder to run the command in, then its arguments,
each ended by a NUL byte. Any mismatch (no such entry, a command of an
unexpected form) is an error naming the file and what was expected: exit 1.
"""
import json
import os
import shlex
import sys

LIBRARY_OBJECTS = os.path.join("CMakeFiles", "xtgrad.dir") + os.sep


def fail(message):
    print(f"mutant_commands.py: {message}", file=sys.stderr)
    sys.exit(1)


def library_entry(build, source):
    """The compile_commands.json entry that compiles SOURCE into libxtgrad."""
    database = os.path.join(build, "compile_commands.json")
    if not os.path.isfile(database):
        fail(f"{database} is missing: configure {build} with CMake again "
             "(the project sets CMAKE_EXPORT_COMPILE_COMMANDS)")
    with open(database) as f:
        entries = json.load(f)
    source = os.path.realpath(source)
    for entry in entries:
        path = os.path.join(entry["directory"], entry["file"])
        if os.path.realpath(path) != source:
            continue
        arguments = entry.get("arguments") or shlex.split(entry["command"])
        if "-o" in arguments[:-1]:
            output = arguments[arguments.index("-o") + 1]
            if output.startswith(LIBRARY_OBJECTS):
                return entry, arguments, output
    fail(f"{database} compiles no {source} into libxtgrad (objects in {LIBRARY_OBJECTS}):"
         " a mutant's target must be a .cpp file of the library")


def launcher(build):
    """The build's compiler launcher, as a list: CMAKE_CXX_COMPILER_LAUNCHER
    when given in BUILD/CMakeCache.txt, else the ccache the project found
    (XTGRAD_CCACHE), else none."""
    values = {}
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        for line in f:
            name, _, value = line.partition("=")
            values[name.split(":")[0]] = value.strip()
    for name in ("CMAKE_CXX_COMPILER_LAUNCHER", "XTGRAD_CCACHE"):
        value = values.get(name, "")
        if value and not value.endswith("-NOTFOUND"):
            return value.split(";")
    return []


def member(build, source):
    _, _, output = library_entry(build, source)
    print(os.path.basename(output))


def compile_command(build, source, copy, obj):
    entry, arguments, _ = library_entry(build, source)
    command = launcher(build) + [arguments[0], "-iquote", os.path.dirname(os.path.realpath(source))]
    replaced_source = False
    skip = 0
    for i, argument in enumerate(arguments[1:], start=1):
        if skip:
            skip -= 1
            continue
        if argument in ("-MD", "-MMD", "-MP"):
            continue
        if argument in ("-MT", "-MF", "-MQ"):
            skip = 1
            continue
        if argument == "-o":
            command += ["-o", obj]
            skip = 1
            continue
        path = os.path.join(entry["directory"], argument)
        if arguments[i - 1] == "-c" and os.path.realpath(path) == os.path.realpath(source):
            command.append(copy)
            replaced_source = True
            continue
        command.append(argument)
    if not replaced_source:
        fail(f"the compile command of {source} has no '-c {source}' to replace")
    emit(entry["directory"], command)


def link_command(build, target, library, executable):
    # Makefile builds keep it in <folder>/CMakeFiles/TARGET.dir/; os.walk
    # follows no symbolic link (BUILD/include/xtgrad is one to the sources).
    found = []
    for folder, folders, _ in os.walk(build):
        candidate = os.path.join(folder, "CMakeFiles", f"{target}.dir", "link.txt")
        if os.path.isfile(candidate):
            found.append(candidate)
        folders[:] = [name for name in folders if name != "CMakeFiles"]
    if len(found) != 1:
        fail(f"expected one {target}.dir/link.txt below {build} (a Makefile build of {target}), "
             f"found {len(found)}")
    folder = os.path.dirname(os.path.dirname(os.path.dirname(found[0])))
    with open(found[0]) as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    if len(lines) != 1:
        fail(f"{found[0]}: expected one link command, found {len(lines)} lines")
    arguments = shlex.split(lines[0])
    ours = os.path.realpath(os.path.join(build, "libxtgrad.a"))
    command = []
    replaced_library = replaced_output = 0
    skip = False
    for argument in arguments:
        if skip:
            skip = False
            continue
        if argument == "-o":
            command += ["-o", executable]
            replaced_output += 1
            skip = True
        elif os.path.realpath(os.path.join(folder, argument)) == ours:
            command.append(library)
            replaced_library += 1
        else:
            command.append(argument)
    if replaced_output != 1 or replaced_library == 0:
        fail(f"{found[0]}: expected one '-o {target}' and {ours} in the link command")
    emit(folder, command)


def emit(folder, command):
    sys.stdout.write("".join(part + "\0" for part in [folder] + command))


def main():
    commands = {"member": (member, 2), "compile": (compile_command, 4), "link": (link_command, 4)}
    if len(sys.argv) < 2 or sys.argv[1] not in commands or len(sys.argv) != 2 + commands[sys.argv[1]][1]:
        fail("usage: member BUILD SOURCE | compile BUILD SOURCE COPY OBJECT | "
             "link BUILD TARGET LIBRARY EXECUTABLE")
    function, _ = commands[sys.argv[1]]
    build, *rest = sys.argv[2:]
    function(os.path.abspath(build), *rest)


if __name__ == "__main__":
    main()
