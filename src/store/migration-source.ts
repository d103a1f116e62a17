import type { Knex } from 'knex';
import * as initialSchema from './migrations/001-initial-schema.js';
import * as hardening from './migrations/003-hardening.js';
import * as severalInstances from './migrations/004-several-instances.js';
import * as passkeys from './migrations/005-passkeys.js';
import * as apiKeys from './migrations/007-api-keys.js';
import * as socialLogin from './migrations/006-social-login.js';
import * as socialClaims from './migrations/008-social-claims.js';
import * as attemptSlots from './migrations/009-attempt-slots.js';
import * as eventsAndWebhooks from './migrations/010-events-and-webhooks.js';
import * as sso from './migrations/011-sso.js';
import * as passwordless from './migrations/012-passwordless.js';
import * as hostPermissionCatalog from './migrations/013-host-permission-catalog.js';
import * as refreshGenerations from './migrations/014-refresh-generations.js';
import * as outboxPages from './migrations/015-outbox-pages.js';
import * as ticketSocialProvider from './migrations/016-ticket-social-provider.js';
import * as retentionIndexes from './migrations/017-retention-indexes.js';
import { tableNames, type TableNames } from './table-names.js';
import { DEFAULTS } from '../config/defaults.js';
import { dialectOf } from './database.js';
import { withStartupLock } from './startup-lock.js';

const DEFAULT_TABLE_PREFIX = DEFAULTS.tablePrefix;

interface Migration {
  name: string;
  up(table: TableNames): (knex: Knex) => Promise<void>;
}

/** Migrations ship inside the bundle, so they run the same from ESM, CJS and tsx. Append, never edit. */
const MIGRATIONS: Migration[] = [
  { name: '001-initial-schema', up: initialSchema.up },
  { name: '003-hardening', up: hardening.up },
  { name: '004-several-instances', up: severalInstances.up },
  { name: '005-passkeys', up: passkeys.up },
  { name: '006-social-login', up: socialLogin.up },
  { name: '007-api-keys', up: apiKeys.up },
  { name: '008-social-claims', up: socialClaims.up },
  { name: '009-attempt-slots', up: attemptSlots.up },
  { name: '010-events-and-webhooks', up: eventsAndWebhooks.up },
  { name: '011-sso', up: sso.up },
  { name: '012-passwordless', up: passwordless.up },
  { name: '013-host-permission-catalog', up: hostPermissionCatalog.up },
  { name: '014-refresh-generations', up: refreshGenerations.up },
  { name: '015-outbox-pages', up: outboxPages.up },
  { name: '016-ticket-social-provider', up: ticketSocialProvider.up },
  { name: '017-retention-indexes', up: retentionIndexes.up },
];

export class BundledMigrationSource implements Knex.MigrationSource<Migration> {
  constructor(private readonly table: TableNames) {}

  getMigrations(): Promise<Migration[]> {
    return Promise.resolve(MIGRATIONS);
  }

  getMigrationName(migration: Migration): string {
    return migration.name;
  }

  getMigration(migration: Migration): Promise<Knex.Migration> {
    return Promise.resolve({
      up: migration.up(this.table),
      down: () => Promise.reject(new Error('identity-router migrations are forward-only')),
    });
  }
}

export function migrationConfig(table: TableNames, prefix: string): Knex.MigratorConfig {
  return {
    migrationSource: new BundledMigrationSource(table),
    tableName: `${prefix}migrations`,
  };
}

/**
 * Applies the bundled migrations to a host's Knex, for hosts that run migrations from their
 * own deploy pipeline and pass `migrate: false` to the router.
 */
export async function migrateIdentityDatabase(knex: Knex, options: { tablePrefix?: string } = {}): Promise<void> {
  const prefix = options.tablePrefix ?? DEFAULT_TABLE_PREFIX;
  // Several deploy jobs (or a job and a starting router) take turns instead of racing Knex's lock table.
  await withStartupLock(knex, dialectOf(knex), prefix, () => knex.migrate.latest(migrationConfig(tableNames(prefix), prefix)));
}
