"""The NIXL KV path probe (nixl_kv_probe.py): a standalone script that runs in the engine
images and in doctor's process mode. It sits alone in this folder because running a script puts
its folder first on sys.path: beside generator/probes/http.py it would shadow the stdlib."""
