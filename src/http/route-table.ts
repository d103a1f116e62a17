import { errors } from '../errors.js';

/** A route as the table needs it: a method and a path of literal and `:name` segments. */
export interface TableRoute {
  method: string;
  path: string;
}

export interface MatchedRoute<T> {
  route: T;
  params: Record<string, string>;
}

interface CompiledRoute<T> {
  route: T;
  /** Lower-cased literal segments; `undefined` where the path has a parameter. */
  literals: Array<string | undefined>;
  /** The parameter names, at the positions of the `undefined` literals. */
  names: Array<string | undefined>;
}

const PARAMETER = /^:([A-Za-z_][A-Za-z0-9_]*)$/;
const LITERAL = /^[A-Za-z0-9._~-]+$/;

/**
 * Finds the route of a request in one step instead of trying every route in turn.
 *
 * Express tries each registered route's regular expression, and walks each route's handlers
 * through its own layers: on every request to this router that was the largest share of its
 * time above bare Express (docs/performance.md). The table keeps Express's matching rules so
 * no address changes meaning:
 * - routes are tried in declaration order, among those of the method with as many segments
 *   and the same first segment;
 * - literal segments match case-insensitively, and one trailing slash is tolerated;
 * - a parameter is one non-empty segment, percent-decoded; a segment that does not decode
 *   names nothing (404 `not_found`);
 * - HEAD is answered by the GET route.
 */
export class RouteTable<T extends TableRoute> {
  /** `METHOD segments first-segment` → candidates in declaration order. */
  private readonly byFirstSegment = new Map<string, CompiledRoute<T>[]>();
  /** `METHOD segments` → the candidates whose first segment is a parameter (for a first segment no literal route has). */
  private readonly byParameterFirst = new Map<string, CompiledRoute<T>[]>();

  constructor(routes: readonly T[]) {
    const compiled = routes.map((route) => compile(route));
    for (const entry of compiled) {
      const shape = shapeKey(entry.route.method, entry.literals.length);
      if (entry.literals[0] === undefined) {
        // A parameter first: a candidate wherever a request has this many segments.
        for (const [key, candidates] of this.byFirstSegment) if (key.startsWith(`${shape} `)) candidates.push(entry);
        this.bucket(this.byParameterFirst, shape).push(entry);
      } else {
        const key = `${shape} ${entry.literals[0]}`;
        if (!this.byFirstSegment.has(key)) {
          // Earlier routes with a parameter first come before this one, as Express would try them.
          this.byFirstSegment.set(key, [...(this.byParameterFirst.get(shape) ?? [])]);
        }
        this.byFirstSegment.get(key)!.push(entry);
      }
    }
  }

  /**
   * The route that answers `method` on `path` (relative to the router's mount, not decoded),
   * with its decoded parameters; undefined when none does.
   */
  match(method: string, path: string): MatchedRoute<T> | undefined {
    const segments = path.split('/');
    // A path starts with "/": the first element is empty. One trailing slash is tolerated.
    if (segments.length > 2 && segments[segments.length - 1] === '') segments.pop();
    segments.shift();
    const wanted = method === 'HEAD' ? 'get' : method.toLowerCase();
    const shape = shapeKey(wanted, segments.length);
    const first = segments[0]!.toLowerCase();
    const candidates = this.byFirstSegment.get(`${shape} ${first}`) ?? this.byParameterFirst.get(shape);
    if (!candidates) return undefined;
    for (const candidate of candidates) {
      const params = matchSegments(candidate, segments);
      if (params) return { route: candidate.route, params };
    }
    return undefined;
  }

  private bucket(map: Map<string, CompiledRoute<T>[]>, key: string): CompiledRoute<T>[] {
    let list = map.get(key);
    if (!list) {
      list = [];
      map.set(key, list);
    }
    return list;
  }
}

const shapeKey = (method: string, segments: number) => `${method} ${segments}`;

function compile<T extends TableRoute>(route: T): CompiledRoute<T> {
  if (!route.path.startsWith('/') || route.path.length < 2) throw new TypeError(`route path "${route.path}" must start with "/" and name something`);
  const literals: Array<string | undefined> = [];
  const names: Array<string | undefined> = [];
  for (const segment of route.path.slice(1).split('/')) {
    const parameter = PARAMETER.exec(segment);
    if (parameter) {
      literals.push(undefined);
      names.push(parameter[1]);
    } else if (LITERAL.test(segment)) {
      literals.push(segment.toLowerCase());
      names.push(undefined);
    } else {
      // Wildcards, optional parts and the like would need Express's full syntax.
      throw new TypeError(`route path "${route.path}": segment "${segment}" is neither a literal nor a :parameter`);
    }
  }
  return { route, literals, names };
}

function matchSegments<T>(candidate: CompiledRoute<T>, segments: string[]): Record<string, string> | undefined {
  const { literals, names } = candidate;
  for (let index = 0; index < literals.length; index += 1) {
    const literal = literals[index];
    const segment = segments[index]!;
    if (literal === undefined) {
      if (segment === '') return undefined;
    } else if (segment.length !== literal.length || segment.toLowerCase() !== literal) {
      return undefined;
    }
  }
  const params: Record<string, string> = {};
  for (let index = 0; index < names.length; index += 1) {
    const name = names[index];
    if (name !== undefined) params[name] = decodeSegment(segments[index]!);
  }
  return params;
}

function decodeSegment(segment: string): string {
  if (!segment.includes('%')) return segment;
  try {
    return decodeURIComponent(segment);
  } catch {
    throw errors.notFound();
  }
}
