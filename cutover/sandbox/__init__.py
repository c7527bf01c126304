"""The sandbox: a stand-in for an SGLang server that runs the real plugin runtime on synthetic verify traffic.

It is labelled as a sandbox everywhere it speaks (HTTP answers, metrics, heartbeats' kernel label) and never
pretends to be a model. One server process (HTTP: /health, /get_server_info, /metrics, /generate) supervises
one process per tensor-parallel rank; each rank process registers the plugin's hooks through SGLang's own
HookRegistry onto a stand-in backend (``cutover.sandbox.backend.StandInBackend``), exactly as SGLang's
TritonAttnBackend gets them, and drives random DDTree verify batches through it.

Runs in the serving environment: standard library + torch + kernel_ext (+ sglang for its HookRegistry and,
on a GPU, its Triton kernel). Command line: ``python -m cutover.sandbox up|down|status|restart``.
"""
