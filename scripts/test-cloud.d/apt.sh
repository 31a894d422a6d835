# Sourced by the scripts that install Debian packages (test-cloud, external-services,
# control-plane-deps, build-images). They install beside each other in CI (the services and
# the images' caches): apt's list lock is not covered by DPkg::Lock::Timeout, and a second
# `apt-get update` failed at once on a fresh machine. One lock of ours serialises them; the
# timeout covers a foreign dpkg.
apt_get() { flock -w 1800 /run/lock/openstack-operator-apt.lock apt-get -o DPkg::Lock::Timeout=900 "$@"; }
