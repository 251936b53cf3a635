"""Which Debian packages feed the gettext corpus, and which never may.

The list is declared here, group by group, with the reason each group is in.
Every package was checked (Debian 12 "bookworm", amd64) to ship German
``.mo`` catalogs; LibreOffice's language pack alone holds ~28k messages.
Games and applications with prose (Wesnoth campaigns, help texts, compiler
and database diagnostics) give sentence-like pairs; desktop programs give
the short UI strings that speculative decoding of software text will meet.
"""

from __future__ import annotations

from typing import NamedTuple


class PackageGroup(NamedTuple):
    """Packages chosen together, and why."""

    reason: str
    packages: tuple[str, ...]


# Reserved for evaluation: never downloaded, read or mixed into training.
RESERVED_PACKAGES = frozenset({
    "apt", "aptitude-common", "bash", "coreutils", "cpio", "debconf-i18n",
    "diffutils", "dpkg", "e2fsprogs-l10n", "findutils", "gawk", "gettext",
    "gnupg-l10n", "grep", "libc-l10n", "make", "man-db", "nano", "sed", "tar",
    "util-linux-locales", "wget",
})
# The gettext domains (catalog names) of those packages' programs. Other
# packages can carry a copy of one (a bundled tool, a sibling binary package
# such as gettext-base or dpkg-dev), so catalogs with these names are left
# out wherever they are found.
RESERVED_DOMAINS = frozenset({
    "apt", "apt-utils", "aptitude", "bash", "coreutils", "cpio", "debconf",
    "diffutils", "dpkg", "dpkg-dev", "dselect", "e2fsprogs", "findutils",
    "gawk", "gettext-runtime", "gettext-tools", "gnupg2", "grep", "libc",
    "make", "man-db", "man-db-gnulib", "nano", "sed", "tar", "util-linux",
    "wget", "wget-gnulib",
})

PACKAGE_GROUPS: tuple[PackageGroup, ...] = (
    PackageGroup(
        "LibreOffice's German language pack: the largest single set of "
        "translated UI strings (~28k messages), office vocabulary",
        ("libreoffice-l10n-de",)),
    PackageGroup(
        "compilers, version control, databases, system tools: diagnostics and "
        "help texts are whole sentences",
        ("gcc-12-locales", "binutils-common", "bison", "git", "subversion",
         "mercurial-common", "postgresql-15", "postgresql-client-15", "libpq5",
         "r-base-core", "xfsprogs", "grub-common", "sudo", "procps", "psmisc",
         "krb5-locales", "mailutils-common", "systemd", "network-manager",
         "pulseaudio", "packagekit", "gvfs-common", "libglib2.0-data")),
    PackageGroup(
        "games with stories, tutorials and help: the most sentence-like text",
        ("wesnoth-1.16-data", "wesnoth-1.16-httt", "wesnoth-1.16-tsg",
         "wesnoth-1.16-trow", "wesnoth-1.16-did", "wesnoth-1.16-dm",
         "wesnoth-1.16-ei", "wesnoth-1.16-l", "wesnoth-1.16-low", "wesnoth-1.16-nr",
         "wesnoth-1.16-sof", "wesnoth-1.16-sota", "wesnoth-1.16-sotbe",
         "wesnoth-1.16-thot", "wesnoth-1.16-utbs", "wesnoth-1.16-dw",
         "widelands-data", "warzone2100-data", "freeciv-data", "minetest-data",
         "tuxpaint-data", "aisleriot", "gnome-chess", "gnome-mines",
         "gnome-sudoku", "quadrapassel", "knights", "kpat", "ksudoku",
         "kmahjongg", "kmines", "kbounce")),
    PackageGroup(
        "graphics, audio, video, science, finance and publishing programs: "
        "large catalogs with domain vocabulary and long tooltips",
        ("gimp-data", "inkscape", "krita-l10n", "darktable", "digikam-data",
         "hugin-data", "fontforge-common", "dia-common", "kicad", "audacity-data",
         "kdenlive-data", "vlc-l10n", "shotwell-common", "rhythmbox-data",
         "totem-common", "brasero-common", "k3b-i18n", "xournalpp", "grass-core",
         "kstars-data", "kalzium-data", "marble-data", "kig", "cantor", "step",
         "rocs", "kmplot", "kturtle", "kwordquiz", "kbruch", "gramps",
         "gnucash-common", "gnumeric-common", "lyx-common")),
    PackageGroup(
        "mail, chat, web and transfer clients: sentences about accounts, "
        "messages and errors",
        ("evolution-common", "evolution-data-server-common", "claws-mail-i18n",
         "sylpheed-i18n", "pidgin-data", "gajim", "hexchat-common",
         "filezilla-common", "deluge-common", "remmina-common", "neomutt",
         "lynx-common", "elinks-data", "pan", "geary", "epiphany-browser-data",
         "polari")),
    PackageGroup(
        "editors, file managers and administration front ends",
        ("mc-data", "gnome-commander-data", "krusader", "geany-common",
         "geany-plugins-common", "synaptic", "blueman", "gnome-disk-utility",
         "kleopatra", "kgpg", "partitionmanager", "kile-l10n", "kdevelop-l10n")),
    PackageGroup(
        "GNOME: toolkit and desktop, then its applications",
        ("libgtk-3-common", "libgtk-4-common", "libgtk2.0-common",
         "gnome-control-center-data", "gnome-shell-common", "mutter-common",
         "gnome-settings-daemon-common", "gnome-session-common", "nautilus-data",
         "gnome-software-common", "gnome-builder", "gedit-common",
         "gnome-text-editor", "evince-common", "eog", "gnome-maps", "gnome-weather",
         "gnome-calendar", "gnome-contacts", "gnome-system-monitor",
         "gnome-terminal-data", "gnome-tweaks", "file-roller", "gnome-boxes",
         "gnome-photos", "gnome-music", "gnome-clocks", "gnome-characters",
         "gnome-font-viewer", "gnome-logs", "gnome-sound-recorder", "simple-scan",
         "seahorse", "baobab", "gnome-calculator", "cheese-common", "dconf-editor",
         "gnome-remote-desktop", "gnome-initial-setup", "gnome-user-share",
         "gnome-keyring", "gnome-bluetooth-3-common", "network-manager-gnome",
         "pavucontrol")),
    PackageGroup(
        "KDE: Plasma, Frameworks (translations in the -data packages), PIM and "
        "applications",
        ("plasma-workspace-data", "plasma-desktop-data", "kwin-data",
         "kdeplasma-addons-data", "kde-cli-tools-data", "plasma-nm", "plasma-pa",
         "plasma-framework", "kscreen", "kinfocenter", "systemsettings",
         "khelpcenter", "kio", "ktexteditor-data", "libkf5kdelibs4support-data",
         "libkf5unitconversion-data", "libkf5sysguard-data", "libkf5khtml-data",
         "libkf5xmlgui-data", "libkf5newstuff-data", "libkf5textwidgets-data",
         "libkf5filemetadata-data", "libkf5configwidgets-data", "libkf5wallet-data",
         "libkf5i18n-data", "libkf5contacts-data", "libkf5package-data",
         "libkf5kcmutils-data", "libkf5parts-data", "libkf5service-data",
         "libkf5declarative-data", "libkf5iconthemes-data",
         "libkf5notifyconfig-data", "libkf5mime-data", "libkf5akonadi-data",
         "libkf5akonadicalendar-data", "libkf5calendarsupport-data",
         "libkf5eventviews-data", "libkf5incidenceeditor-data",
         "libkf5ksieve-data", "libkf5libkdepim-data", "libkf5libkleo-data",
         "libkf5mailcommon-data", "libkf5pimcommon-data",
         "libkf5pimtextedit-data", "libkf5mailtransport-data", "libkf5imap-data",
         "libkf5ldap-data", "akonadi-contacts-data", "akonadi-mime-data",
         "kmail", "korganizer", "kontact", "akregator", "kaddressbook-data",
         "kdepim-addons", "kate5-data", "dolphin", "konsole", "okular",
         "gwenview", "ark", "kdeconnect", "kcalc", "kdialog", "kolourpaint",
         "skanlite", "filelight", "kfind")),
    PackageGroup(
        "Xfce: panel, settings and its small applications (good held-out "
        "candidates: many programs of a few hundred messages)",
        ("xfce4-panel", "thunar-data", "xfce4-settings", "xfdesktop4-data",
         "xfce4-session", "xfwm4", "mousepad", "ristretto",
         "xfce4-power-manager-data", "xfce4-terminal", "parole", "xfburn",
         "xfce4-notifyd", "xfce4-appfinder", "xfce4-screenshooter",
         "xfce4-taskmanager", "xfce4-whiskermenu-plugin", "xfce4-weather-plugin",
         "xfce4-pulseaudio-plugin", "libxfce4ui-common", "catfish", "xfce4-dict",
         "thunar-archive-plugin", "tumbler-common")),
    PackageGroup(
        "MATE, Cinnamon and Enlightenment: other desktops' own wording of "
        "the same tasks",
        ("mate-desktop-common", "caja-common", "mate-control-center-common",
         "mate-panel-common", "pluma-common", "engrampa-common", "atril-common",
         "eom-common", "mate-power-manager-common", "mate-settings-daemon-common",
         "mate-utils-common", "mate-applets-common", "mate-terminal-common",
         "marco-common", "mate-media-common", "mate-session-manager",
         "mate-screensaver-common", "cinnamon-l10n", "enlightenment-data")),
)
# Checked and left out: iso-codes, libgweather-4-common and kgeography-data
# (lists of names, not sentences); packages whose German translations are Qt
# .qm files or absent (stellarium-data, supertuxkart-data, scribus-data, ...).


def declared_packages() -> list[str]:
    """Every package of ``PACKAGE_GROUPS``, in declaration order, once."""
    return list(dict.fromkeys(p for group in PACKAGE_GROUPS for p in group.packages))
