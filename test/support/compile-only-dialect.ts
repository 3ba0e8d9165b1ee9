import { DummyDriver, PostgresAdapter, PostgresIntrospector, PostgresQueryCompiler, type Dialect, type Driver } from 'kysely';

/** PostgreSQL's SQL, compiled without a server: the driver executes nothing unless one is given. */
export function compileOnlyDialect(driver: Driver = new DummyDriver()): Dialect {
  return {
    createAdapter: () => new PostgresAdapter(),
    createDriver: () => driver,
    createIntrospector: (k) => new PostgresIntrospector(k),
    createQueryCompiler: () => new PostgresQueryCompiler(),
  };
}
