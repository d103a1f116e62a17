import { isIPv4, isIPv6 } from 'node:net';

/**
 * Where an address points, for the outbound guard (docs/sso.md and docs/webhooks.md). `link_local` is
 * its own class because no configuration admits it: 169.254.169.254 and fe80::/10 are where
 * cloud metadata services answer with credentials.
 */
export type AddressClass = 'public' | 'private' | 'link_local';

type Range = readonly [base: number, prefixLength: number];

const ipv4 = (dotted: string): number => dotted.split('.').reduce((value, octet) => value * 256 + Number(octet), 0);
const range = (cidr: string): Range => {
  const [base, length] = cidr.split('/');
  return [ipv4(base!), Number(length)];
};

const IPV4_LINK_LOCAL = range('169.254.0.0/16');
/** Everything that is not the public internet: private, loopback, CGNAT, benchmarking, documentation, multicast and reserved. */
const IPV4_PRIVATE: readonly Range[] = [
  '0.0.0.0/8', '10.0.0.0/8', '100.64.0.0/10', '127.0.0.0/8', '172.16.0.0/12', '192.0.0.0/24', '192.0.2.0/24',
  '192.168.0.0/16', '198.18.0.0/15', '198.51.100.0/24', '203.0.113.0/24', '224.0.0.0/3',
].map(range);

function inRange(address: number, [base, length]: Range): boolean {
  if (length === 0) return true;
  const size = 2 ** (32 - length);
  return Math.floor(address / size) === Math.floor(base / size);
}

function classifyIpv4(address: number): AddressClass {
  if (inRange(address, IPV4_LINK_LOCAL)) return 'link_local';
  return IPV4_PRIVATE.some((entry) => inRange(address, entry)) ? 'private' : 'public';
}

/** The eight 16-bit groups of an IPv6 address (a zone id is dropped; a dotted IPv4 tail becomes two groups). */
function ipv6Groups(text: string): number[] | undefined {
  let address = text.toLowerCase();
  const zone = address.indexOf('%');
  if (zone >= 0) address = address.slice(0, zone);
  if (!isIPv6(address)) return undefined;
  const lastColon = address.lastIndexOf(':');
  const tail = address.slice(lastColon + 1);
  if (tail.includes('.')) {
    const value = ipv4(tail);
    address = `${address.slice(0, lastColon + 1)}${Math.floor(value / 65536).toString(16)}:${(value % 65536).toString(16)}`;
  }
  const [head = '', rest] = address.split('::');
  const parse = (part: string) => (part === '' ? [] : part.split(':').map((group) => Number.parseInt(group, 16)));
  const front = parse(head);
  const back = rest === undefined ? [] : parse(rest);
  const groups = rest === undefined ? front : [...front, ...new Array<number>(8 - front.length - back.length).fill(0), ...back];
  return groups.length === 8 ? groups : undefined;
}

const embeddedIpv4 = (high: number, low: number) => high * 65536 + low;

function classifyIpv6(groups: number[]): AddressClass {
  const [g0 = 0, g1 = 0, g2 = 0, g3 = 0, g4 = 0, g5 = 0, g6 = 0, g7 = 0] = groups;
  const zeroTo = (end: number) => groups.slice(0, end).every((group) => group === 0);
  // IPv4-mapped (::ffff:a.b.c.d) and IPv4-compatible (::a.b.c.d, which covers :: and ::1) carry an IPv4 address.
  if (zeroTo(5) && g5 === 0xffff) return classifyIpv4(embeddedIpv4(g6, g7));
  if (zeroTo(6)) return classifyIpv4(embeddedIpv4(g6, g7));
  // NAT64 (64:ff9b::/96) reaches the IPv4 address in its last 32 bits; 64:ff9b:1::/48 is for local use.
  if (g0 === 0x64 && g1 === 0xff9b && g2 === 0 && g3 === 0 && g4 === 0 && g5 === 0) return classifyIpv4(embeddedIpv4(g6, g7));
  if (g0 === 0x64 && g1 === 0xff9b && g2 === 1) return 'private';
  // 6to4 (2002::/16) reaches the IPv4 address in bits 16-47.
  if (g0 === 0x2002) return classifyIpv4(embeddedIpv4(g1, g2));
  if ((g0 & 0xffc0) === 0xfe80) return 'link_local';
  if ((g0 & 0xfe00) === 0xfc00) return 'private'; // unique-local fc00::/7
  if ((g0 & 0xff00) === 0xff00) return 'private'; // multicast
  if ((g0 & 0xffc0) === 0xfec0) return 'private'; // deprecated site-local
  if (g0 === 0x2001 && g1 === 0x0db8) return 'private'; // documentation
  if (g0 === 0x2001 && g1 === 0) return 'private'; // Teredo: an obfuscated IPv4 address behind a relay
  if (g0 === 0x0100 && g1 === 0 && g2 === 0 && g3 === 0) return 'private'; // discard-only
  return 'public';
}

/** Classifies an IP address in any textual form `net` accepts; anything that is not an address is `private` (refused). */
export function classifyAddress(address: string): AddressClass {
  if (isIPv4(address)) return classifyIpv4(ipv4(address));
  const groups = ipv6Groups(address);
  return groups ? classifyIpv6(groups) : 'private';
}
