"""The host protocol: the files and records both sides of a serving host share.

The rule of this package: standard library only, and no import of any other cutover module. Its modules run
in three places: the operator's CLI, the plugin inside SGLang's process (where typer, ansible and paramiko are
absent), and on the host inside Ansible modules, which import it as `ansible.module_utils.cutover_hostprotocol`
(`playbooks/module_utils/cutover_hostprotocol` links to this folder). Anything that names a host-side path or the
fields of a host-side record lives here.

    hostlayout    paths, records (control, heartbeat, lock, manifest) and their atomic writes
    controlwrite  the control-file write lock and the one read-modify-write of control.json
    phases        the workflow phase of a host, its transitions, and phase.json's record
    statsrecord   one line of a rank's stats file: written by the plugin, read by gates, status and report
    acceptance    the release's kernel acceptance on the host's GPU
"""
