#!/bin/sh
# The project image's system packages and settings, on top of debian:<suite>-slim.
# The Dockerfile's final stage runs this script, and so does hack/image/debian.sh
# in its debootstrapped chroot for the e2e and release image (test/e2e/images
# names that cached layer after a hash of this file, so an edit rebuilds it).
# The node plugin needs the storage tools (lvm2, dmsetup, filesystem tools);
# the bench needs fio.
set -eu
apt-get update
apt-get install -y --no-install-recommends lvm2 dmsetup thin-provisioning-tools e2fsprogs xfsprogs util-linux fio
rm -rf /var/lib/apt/lists/*
# The node plugin runs LVM without udev inside its container.
sed -i -e 's/^\(\s*\)# udev_sync = 1/\1udev_sync = 0/' -e 's/^\(\s*\)# udev_rules = 1/\1udev_rules = 0/' /etc/lvm/lvm.conf
