{ test_check — libshoal's checked mode reached from Pascal: a one-byte
  overrun of a GetMem block and a write into a freed string's memory are
  found by ShoalCheckHeap (reported, not aborted, by the run-env below);
  intact blocks, strings and objects pass.

  run-env: SHOAL_CHECK=1 SHOAL_ABORT_ON_ERROR=0 }
program test_check;

{$mode objfpc}{$H+}

uses
  ShoalMM, {$ifdef unix} cthreads, {$endif} SysUtils, Classes;

{$i check.inc}

var
  Intact, Overrun, Freed: PByte;
  List: TStringList;
  i: Integer;
begin
  Check(ShoalActive, 'ShoalMM did not install itself');
  List := TStringList.Create;
  for i := 1 to 1000 do
    List.Add(IntToStr(i) + ' bottles');
  Intact := GetMem(100);
  FillChar(Intact^, 100, 7);
  Check(ShoalCheckHeap = 0, 'faults found in an intact heap');

  Overrun := GetMem(40);
  FillChar(Overrun^, 41, 1); { one byte too many }
  Check(ShoalCheckHeap = 1, 'the one-byte overrun was not found');
  Overrun[40] := $FD; { the guard's own value again: repaired }
  Check(ShoalCheckHeap = 0, 'a repaired guard still counts as a fault');

  Freed := GetMem(64);
  FreeMem(Freed);
  Freed[10] := 1; { write after free, into the quarantine }
  Check(ShoalCheckHeap = 1, 'the write after free was not found');
  Freed[10] := $DD;

  Check(MemSize(Intact) = 100, 'MemSize is not the size asked for in checked mode');
  FreeMem(Overrun);
  FreeMem(Intact);
  List.Free;
  Check(ShoalCheckHeap = 0, 'faults left after freeing');
  Writeln('ok ', ChecksRun, ' checks');
end.
