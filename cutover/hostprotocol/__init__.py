"""The host protocol: the files and records both sides of a serving host share.

The rule of this package: standard library only, and no import of any other cutover module. Its modules run
in three places: the operator's CLI, the plugin inside SGLang's process (where typer, ansible and paramiko are
absent), and on the host as Ansible modules, which reach them through the links in `playbooks/module_utils/`
(`cutover_<module>.py`). Anything that names a host-side path or the fields of a host-side record lives here.

    hostlayout    paths, records (control, heartbeat, lock, manifest) and their atomic writes
    controlwrite  the control-file write lock and the one read-modify-write of control.json
    phases        the workflow phase of a host and the transitions stage and rollback make
    acceptance    the release's kernel acceptance on the host's GPU
"""
