// Grafana's own TypeScript types for a dashboard (@grafana/schema, the release matching the
// pinned grafana-foundation-sdk), as JSON: what tests/observe/test_dashboards.py holds every
// generated dashboard to with `tsc --strict`. An object literal with a field the type does not
// know, a value of the wrong kind or a missing required field fails to compile.
import type { Dashboard, VariableModel } from '@grafana/schema';

// A type as JSON spells it: string enums (ThresholdsMode and the like) as their values.
type Json<T> = T extends string
  ? `${T}`
  : T extends number | boolean | null | undefined
    ? T
    : T extends ReadonlyArray<infer U>
      ? Json<U>[]
      : T extends object
        ? { [K in keyof T]: Json<T[K]> }
        : T;

// The one difference allowed: grafana-foundation-sdk writes an interval variable's `auto`,
// `auto_count` and `auto_min` on every variable (Grafana's CUE schema has them; its TypeScript
// types do not, and Grafana ignores them on a custom variable).
type SdkVariable = Json<VariableModel> & { auto?: boolean; auto_count?: number; auto_min?: string };

export type GrafanaDashboard = Omit<Json<Dashboard>, 'templating'> & {
  templating?: { list?: SdkVariable[] };
};
