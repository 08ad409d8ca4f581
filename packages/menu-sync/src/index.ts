// @org/menu-sync: the role-based worker system's processors (store discovery, entry-point
// discovery, product discovery, product resync, analytics refresh), the menu platform
// they call (HTTP provider, local mode) and the fake menu platform server.
export {
  discoveredStore,
  menu,
  menuProduct,
  MenuPlatformError,
  type DiscoveredStore,
  type MenuPlatform,
  type MenuProduct,
} from './platform.js';
export { createHttpMenuPlatform, type HttpMenuPlatformOptions } from './http-platform.js';
export {
  startFakeMenuPlatform,
  type FakeMenuPlatform,
  type FakeMenuPlatformOptions,
  type FakeRequest,
} from './fake-platform.js';
export {
  createLocalMenuPlatform,
  menuPlatformFromEnv,
  MenuPlatformConfigError,
  MENU_PLATFORM_ENV_VARS,
  type MenuPlatformLogger,
} from './from-env.js';
export {
  MENU_ROLES,
  menuProcessor,
  menuProcessors,
  type MenuProcessor,
  type MenuRole,
  type MenuTaskContext,
  type MenuTaskOutcome,
} from './processors.js';
