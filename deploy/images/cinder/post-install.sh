#!/bin/sh
# The RBD driver imports Ceph's `rados` and `rbd`, which exist only as Debian's python3-rados
# and python3-rbd (in the base): link just those modules into the venv rather than opening it
# to every system package.
set -eu
site=$(/opt/openstack/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for m in /usr/lib/python3/dist-packages/rados*.so /usr/lib/python3/dist-packages/rbd*.so; do
  ln -s "$m" "$site/"
done
/opt/openstack/bin/python3 -c 'import rados, rbd'
