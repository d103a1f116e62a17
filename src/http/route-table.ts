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
 * Express tries each registered route's regular expression in turn, and walks each route's
 * handlers through its own layers, on every request: with 89 routes a measurable share of a
 * read's cost above bare Express (docs/performance.md). The table keeps Express's matching
 * rules, so no address changes meaning:
 * - routes are tried in declaration order, among those of the method with as many segments
 *   and the same first segment;
 * - literal segments match case-insensitively, and one trailing slash is tolerated;
 * - a parameter is one non-empty segment, percent-decoded; a segment that does not decode
 *   names nothing (404 `not_found`);
 * - HEAD is answered by the GET route.
 */
export class RouteTable<T extends TableRoute> {
  /** Method → segment count → the candidates: no string is built to look a request up. */
  private readonly shapes = new Map<string, Map<number, Shape<T>>>();
  /** Every route in declaration order. */
  private readonly all: CompiledRoute<T>[] = [];

  constructor(routes: readonly T[]) {
    for (const route of routes) {
      const entry = compile(route);
      this.all.push(entry);
      let byCount = this.shapes.get(route.method);
      if (!byCount) {
        byCount = new Map();
        this.shapes.set(route.method, byCount);
      }
      let shape = byCount.get(entry.literals.length);
      if (!shape) {
        shape = { byFirstSegment: new Map(), parameterFirst: [] };
        byCount.set(entry.literals.length, shape);
      }
      const first = entry.literals[0];
      if (first === undefined) {
        // A parameter first: a candidate whatever the first segment, after the routes declared before it.
        for (const candidates of shape.byFirstSegment.values()) candidates.push(entry);
        shape.parameterFirst.push(entry);
      } else {
        // Routes declared earlier with a parameter first come before this one, as Express would try them.
        if (!shape.byFirstSegment.has(first)) shape.byFirstSegment.set(first, [...shape.parameterFirst]);
        shape.byFirstSegment.get(first)!.push(entry);
      }
    }
  }

  /**
   * The route that answers `method` on `path` (relative to the router's mount, not decoded),
   * with its decoded parameters; undefined when none does.
   */
  match(method: string, path: string): MatchedRoute<T> | undefined {
    const segments = segmentsOf(path);
    const shape = this.shapes.get(method === 'HEAD' ? 'get' : method.toLowerCase())?.get(segments.length);
    if (!shape) return undefined;
    const candidate = (shape.byFirstSegment.get(segments[0]!.toLowerCase()) ?? shape.parameterFirst).find((entry) => fits(entry, segments));
    return candidate ? { route: candidate.route, params: paramsOf(candidate, segments) } : undefined;
  }

  /** Every route whose path matches, whatever its method, in declaration order: what a 405 lists in `Allow`. */
  routesAt(path: string): T[] {
    const segments = segmentsOf(path);
    return this.all.filter((entry) => fits(entry, segments)).map((entry) => entry.route);
  }
}

/** A path's segments: it starts with "/", so the first element is empty; one trailing slash is tolerated. */
function segmentsOf(path: string): string[] {
  const segments = path.split('/');
  if (segments.length > 2 && segments[segments.length - 1] === '') segments.pop();
  segments.shift();
  return segments;
}

interface Shape<T> {
  /** Lower-cased first segment → candidates in declaration order. */
  byFirstSegment: Map<string, CompiledRoute<T>[]>;
  /** The routes whose first segment is a parameter, for a first segment no literal route has. */
  parameterFirst: CompiledRoute<T>[];
}

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

function fits<T>({ literals }: CompiledRoute<T>, segments: string[]): boolean {
  if (literals.length !== segments.length) return false;
  for (let index = 0; index < literals.length; index += 1) {
    const literal = literals[index];
    const segment = segments[index]!;
    if (literal === undefined ? segment === '' : segment.length !== literal.length || segment.toLowerCase() !== literal) return false;
  }
  return true;
}

function paramsOf<T>({ names }: CompiledRoute<T>, segments: string[]): Record<string, string> {
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
