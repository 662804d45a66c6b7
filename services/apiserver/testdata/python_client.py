"""The Python Kubernetes client (Debian's python3-kubernetes) against
podflow's HTTPS API, as a new user drives it: objects without apiVersion
and kind, a paged list, and watch.Watch().stream().

Environment: PODFLOW_URL, PODFLOW_CA (PEM), PODFLOW_TOKEN. Prints one line
per check and exits non-zero at the first failure.
"""
import os
import sys
import threading
import time

from kubernetes import client, watch

cfg = client.Configuration()
cfg.host = os.environ["PODFLOW_URL"]
cfg.ssl_ca_cert = os.environ["PODFLOW_CA"]
cfg.api_key = {"authorization": "Bearer " + os.environ["PODFLOW_TOKEN"]}
api = client.CoreV1Api(client.ApiClient(cfg))
ns = "default"


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


# Create without apiVersion and kind: the client's models leave them out.
for i in range(5):
    cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="py-%d" % i, labels={"app": "py"}), data={"i": str(i)})
    assert cm.api_version is None and cm.kind is None
    got = api.create_namespaced_config_map(ns, cm)
    if got.kind != "ConfigMap" or got.api_version != "v1" or got.data != {"i": str(i)}:
        fail("create py-%d answered %r %r %r" % (i, got.api_version, got.kind, got.data))
print("created 5 configmaps without apiVersion and kind")

# List with paging.
names, pages, cont = [], 0, None
while True:
    page = api.list_namespaced_config_map(ns, label_selector="app=py", limit=2, _continue=cont)
    pages += 1
    names += [item.metadata.name for item in page.items]
    cont = page.metadata._continue
    if not cont:
        break
    if pages > 10:
        fail("paging does not end")
if names != ["py-%d" % i for i in range(5)] or pages != 3:
    fail("paged list: %r in %d pages" % (names, pages))
print("listed 5 configmaps in 3 pages")

# Watch: ADDED, MODIFIED, DELETED of one configmap, from the list's
# resourceVersion (the changes are made while the watch runs).
rv = api.list_namespaced_config_map(ns, label_selector="app=py-watch").metadata.resource_version


def change():
    time.sleep(0.5)
    api.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="py-w", labels={"app": "py-watch"})))
    api.patch_namespaced_config_map("py-w", ns, {"data": {"k": "v"}})
    api.delete_namespaced_config_map("py-w", ns)


t = threading.Thread(target=change)
t.start()
seen = []
w = watch.Watch()
for ev in w.stream(api.list_namespaced_config_map, ns, label_selector="app=py-watch", resource_version=rv, timeout_seconds=30):
    seen.append((ev["type"], ev["object"].metadata.name))
    if ev["type"] == "DELETED":
        w.stop()
t.join()
if seen != [("ADDED", "py-w"), ("MODIFIED", "py-w"), ("DELETED", "py-w")]:
    fail("watch saw %r" % seen)
print("watch saw ADDED, MODIFIED, DELETED")
print("OK")
