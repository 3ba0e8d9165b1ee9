import type { BpfLink } from '../native/bpf-native.js';

/**
 * A probe set that attaches no program of its own but switches on work inside one that is
 * attached already (a bit of `hist_switches` in the object's .bss): it is "detached" by
 * switching the bit off again, so sets that share a program are still attached by name.
 *
 * @example
 * const link = new SwitchLink(() => object.setHistSwitch(0x2, true), () => object.setHistSwitch(0x2, false));
 * link.destroy(); // bit off
 */
export class SwitchLink implements BpfLink {
  private on = true;

  constructor(
    switchOn: () => void,
    private readonly switchOff: () => void,
  ) {
    switchOn();
  }

  destroy(): void {
    if (!this.on) return;
    this.on = false;
    this.switchOff();
  }

  pin(): void {
    throw new Error('a switch has no BPF link to pin');
  }

  unpin(): void {
    throw new Error('a switch has no BPF link to unpin');
  }

  fd(): number {
    throw new Error('a switch has no BPF link fd');
  }
}
