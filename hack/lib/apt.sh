# Shared by the setup scripts: install Debian packages that are missing.
# Source it; it defines functions only.

# apt_install WHO PACKAGE...: apt-get installs the packages not installed yet
# (as root; WHO prefixes the messages). Another apt may be running on a shared
# machine: wait for its lock.
apt_install() {
  local who=$1 missing=() p; shift
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "$who: installing ${missing[*]}" >&2
  [ "$(id -u)" -eq 0 ] || { echo "$who: need root to apt-get install ${missing[*]}" >&2; exit 1; }
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends "${missing[@]}" >&2
}
